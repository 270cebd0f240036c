package sqssink_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// fakeSink is a sink on a new queue of a fake of t's own.
func fakeSink(t *testing.T, fifo bool, cfg *sqssink.Config) (*fakeSQS, string, *sqssink.Sink) {
	t.Helper()
	f := newFakeSQS(t)
	queue := queueName(fifo)
	f.createQueue(queue)
	c := sqssink.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Queue = queue
	s, err := sqssink.New(client(f.srv.URL), &c)
	if err != nil {
		t.Fatal(err)
	}
	return f, queue, s
}

// interleaved returns perAggregate messages of each of n aggregates, interleaved, in
// write order (Seq), versions counting up per aggregate.
func interleaved(n, perAggregate int) []outbox.Message {
	var msgs []outbox.Message
	for v := 1; v <= perAggregate; v++ {
		for a := range n {
			m := message(fmt.Sprintf("agg-%d", a))
			m.AggregateVersion, m.Seq = int64(v), int64(len(msgs)+1)
			msgs = append(msgs, m)
		}
	}
	return msgs
}

// On a FIFO queue every message carries its aggregate as MessageGroupId and its event
// id as MessageDeduplicationId, and each group holds its messages in write order — on
// goaws (one SendMessage each) and on the fake (batches).
func TestFIFOGroupOrderAndDedupID(t *testing.T) {
	t.Parallel()
	check := func(name string, msgs []outbox.Message, got []stored) {
		t.Helper()
		if len(got) != len(msgs) {
			t.Fatalf("%s: the queue holds %d messages, want %d", name, len(got), len(msgs))
		}
		byID := make(map[string]outbox.Message)
		for _, m := range msgs {
			byID[m.ID.String()] = m
		}
		last := make(map[string]int64)
		for _, s := range got {
			m, ok := byID[s.dedupID]
			if !ok {
				t.Fatalf("%s: a message with MessageDeduplicationId %q, not an event id", name, s.dedupID)
			}
			if want := sqssink.GroupID(m.AggregateType, m.AggregateID); s.group != want {
				t.Errorf("%s: event %s in group %q, want %q", name, m.ID, s.group, want)
			}
			if m.AggregateVersion <= last[s.group] {
				t.Errorf("%s: group %s: version %d after %d", name, s.group, m.AggregateVersion, last[s.group])
			}
			last[s.group] = m.AggregateVersion
		}
	}
	msgs := interleaved(10, 20)
	f, queue, s := fakeSink(t, true, nil)
	for i, err := range s.Publish(t.Context(), msgs) {
		if err != nil {
			t.Fatalf("fake: message %d: %v", i, err)
		}
	}
	check("fake", msgs, fakeStored(f, queue))

	admin := client(goaws(t))
	gq := createGoawsQueue(t, admin, true)
	gs, err := sqssink.New(admin, &sqssink.Config{Queue: gq, Unbatched: true})
	if err != nil {
		t.Fatal(err)
	}
	msgs = interleaved(5, 10)
	for i, err := range gs.Publish(t.Context(), msgs) {
		if err != nil {
			t.Fatalf("goaws: message %d: %v", i, err)
		}
	}
	stored, err := goawsStored(gq)
	if err != nil {
		t.Fatal(err)
	}
	check("goaws", msgs, stored)
}

// A republish of an event a FIFO queue holds (a lost answer, a relay retry) is
// acknowledged and stored once: its MessageDeduplicationId is the event id.
func TestFIFODuplicateStoredOnce(t *testing.T) {
	t.Parallel()
	f, queue, s := fakeSink(t, true, nil)
	m := message("o-1")
	for attempt := 1; attempt <= 3; attempt++ {
		m.Attempt = attempt
		if err := s.Publish(t.Context(), []outbox.Message{m, message("o-2")}); err[0] != nil || err[1] != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
	}
	got := fakeStored(f, queue)
	if len(got) != 4 {
		t.Fatalf("the queue holds %d messages after 3 publishes of one event and 3 others, want 4", len(got))
	}
}

// A batch in which SQS refuses one entry: that one fails permanently with SQS's code,
// the other nine are stored; with the aggregate's next message in the call, that one
// is not sent.
func TestBatchWithOneInvalidEntry(t *testing.T) {
	t.Parallel()
	f, queue, s := fakeSink(t, true, nil)
	msgs := interleaved(10, 2) // wave 1: one batch of 10; wave 2: the second of each
	bad := msgs[3].ID.String()
	f.setRefuse(func(e fakeEntry) bool { return e.MessageDeduplicationID == bad })
	errs := s.Publish(t.Context(), msgs)
	for i, err := range errs {
		switch {
		case i == 3:
			if !outbox.IsPermanent(err) || !strings.Contains(err.Error(), "InvalidMessageContents") {
				t.Errorf("the refused entry: %v, want permanent InvalidMessageContents", err)
			}
		case i == 13:
			if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
				t.Errorf("the refused aggregate's next message: %v, want ErrNotSent", err)
			}
		case err != nil:
			t.Errorf("message %d: %v", i, err)
		}
	}
	if got := fakeStored(f, queue); len(got) != 18 {
		t.Fatalf("the queue holds %d messages, want 18", len(got))
	}
}

// A message over MaxMessageBytes (body and attributes, as SQS counts them) fails
// permanently; one of exactly MaxMessageBytes is sent.
func TestMessageSizeLimit(t *testing.T) {
	t.Parallel()
	f, queue, s := fakeSink(t, false, nil)
	probe := message("size")
	probe.Payload = []byte("x")
	if err := s.Publish(t.Context(), []outbox.Message{probe})[0]; err != nil {
		t.Fatal(err)
	}
	attrs := messageSize(f.messages(queue)[0]) - 1 // the attributes of such a message
	fits, over := probe, probe
	fits.Payload = []byte(strings.Repeat("x", sqssink.DefaultMaxMessageBytes-attrs))
	over.Payload = []byte(strings.Repeat("x", sqssink.DefaultMaxMessageBytes-attrs+1))
	errs := s.Publish(t.Context(), []outbox.Message{fits, over})
	if errs[0] != nil {
		t.Errorf("a message of exactly MaxMessageBytes: %v", errs[0])
	}
	if !outbox.IsPermanent(errs[1]) || !strings.Contains(errs[1].Error(), "over MaxMessageBytes") {
		t.Errorf("one byte more: %v, want permanent", errs[1])
	}
	if n := messageSize(f.messages(queue)[1]); n != sqssink.DefaultMaxMessageBytes {
		t.Errorf("the stored message takes %d bytes, want %d", n, sqssink.DefaultMaxMessageBytes)
	}
}

// Headers are attributes of their own while they fit in 10; beyond that, or when SQS
// cannot take one as an attribute (its name, an empty value), they travel in
// outbox-headers. The body is a text payload itself; a binary one is base64, an
// empty one "-".
func TestAttributeAndBodyLayout(t *testing.T) {
	t.Parallel()
	f, queue, s := fakeSink(t, false, nil)
	plain := message("a") // 6 headers: id, event type, aggregate type and id, version, schema version, content type
	many := message("b")
	many.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	many.Headers = map[string]string{"tenant": "acme", "x-region": "eu", "x-more": "1"}
	odd := message("c")
	odd.Headers = map[string]string{"x!bang": "v", "empty": ""}
	binary := message("d")
	binary.ContentType, binary.Payload = "application/octet-stream", []byte{0, 1, 0xff}
	empty := message("e")
	empty.Payload = nil
	for i, err := range s.Publish(t.Context(), []outbox.Message{plain, many, odd, binary, empty}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := f.messages(queue)
	if _, ok := got[0].MessageAttributes[sqssink.AttributeHeaders]; ok || got[0].MessageBody != `{"amount": 1200}` {
		t.Errorf("a plain message: attributes %v, body %q; want every header its own attribute, the payload as the body", got[0].MessageAttributes, got[0].MessageBody)
	}
	if a := got[1].MessageAttributes; len(a) != 10 || a["tenant"].StringValue != "acme" || a[sqssink.AttributeHeaders].StringValue != `{"x-more":"1","x-region":"eu"}` {
		t.Errorf("11 headers: attributes %v, want the first 9 (tenant the last of them) and outbox-headers with the other two", a)
	}
	if v := got[2].MessageAttributes[sqssink.AttributeHeaders].StringValue; v != `{"empty":"","x!bang":"v"}` {
		t.Errorf("headers SQS cannot take as attributes: outbox-headers %q", v)
	}
	if got[3].MessageBody != "AAH/" || got[3].MessageAttributes[sqssink.AttributePayloadEncoding].StringValue != "base64" {
		t.Errorf("a binary payload: body %q, attributes %v", got[3].MessageBody, got[3].MessageAttributes)
	}
	if got[4].MessageBody != "-" || got[4].MessageAttributes[sqssink.AttributePayloadEncoding].StringValue != "empty" {
		t.Errorf("an empty payload: body %q, attributes %v", got[4].MessageBody, got[4].MessageAttributes)
	}
}

// A queue that does not exist fails its events permanently, naming SQS's error; the
// other queue's events flow.
func TestMissingQueueIsPermanent(t *testing.T) {
	t.Parallel()
	f, queue, s := fakeSink(t, false, nil)
	missing := message("m")
	missing.Topic = "no-such-queue"
	errs := s.Publish(t.Context(), []outbox.Message{missing, message("o")})
	if !outbox.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "NonExistentQueue") {
		t.Errorf("to a missing queue: %v, want permanent", errs[0])
	}
	if errs[1] != nil || len(f.messages(queue)) != 1 {
		t.Errorf("the other event: %v", errs[1])
	}
}

// A group id fits SQS's 128 characters of its alphabet however long or odd the
// aggregate, and stays one group per aggregate.
func TestGroupID(t *testing.T) {
	t.Parallel()
	if g := sqssink.GroupID("order", "o-1"); g != "order.o-1" {
		t.Errorf("GroupID(order, o-1) = %q", g)
	}
	if g := sqssink.GroupID("order", "tenant:1/ø"); g != "order.tenant_3a1_2f_c3_b8" {
		t.Errorf("GroupID(order, tenant:1/ø) = %q", g)
	}
	long := sqssink.GroupID("order", strings.Repeat("x", 1024))
	if len(long) > 128 || !strings.HasPrefix(long, "sha256-") || long == sqssink.GroupID("order", strings.Repeat("x", 1023)) {
		t.Errorf("GroupID of a long id = %q", long)
	}
	for _, g := range []string{sqssink.GroupID("a.b", "c"), sqssink.GroupID("a", "b.c")} {
		if strings.Count(g, ".") != 1 {
			t.Errorf("GroupID %q: the separator is ambiguous", g)
		}
	}
}
