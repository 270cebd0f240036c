package sinktest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

// checks are the suite's subtests, in the order the package doc lists them.
var checks = []struct {
	name string
	run  func(*suite)
}{
	{"Results", testResults},
	{"Order", testOrder},
	{"Fields", testFields},
	{"Payloads", testPayloads},
	{"EmptyBatch", testEmptyBatch},
	{"CancelledContext", testCancelledContext},
	{"FailureStopsAggregate", testFailureStopsAggregate},
	{"ResultsLineUp", testResultsLineUp},
	{"PayloadTooLarge", testPayloadTooLarge},
	{"FailureMidBatch", testFailureMidBatch},
	{"HeaderValues", testHeaderValues},
	{"MessageIDs", testMessageIDs},
	{"Outage", testOutage},
	{"Concurrent", testConcurrent},
}

func testResults(s *suite) {
	ctx := s.t.Context()
	var g gen
	var all []outbox.Message
	var allErrs []error
	for _, msgs := range [][]outbox.Message{
		{g.next("order", "o-1"), g.next("order", "o-2"), g.next("order", "o-1"), g.next("customer", "o-1")},
		{g.next("order", "o-2")},
	} {
		errs := s.publish(ctx, msgs)
		s.checkAllOK(msgs, errs)
		all, allErrs = append(all, msgs...), append(allErrs, errs...)
	}
	got := s.received()
	s.checkAcked(all, allErrs, got)
	s.checkOrder(got)
}

func testOrder(s *suite) {
	const aggregates, messages = 20, 500
	var g gen
	r := rng(1)
	msgs := make([]outbox.Message, 0, messages)
	for range messages {
		n := r.next() % aggregates
		// Pairs of aggregates share an id and differ by type.
		typ := "order"
		if n%2 == 1 {
			typ = "invoice"
		}
		msgs = append(msgs, g.next(typ, fmt.Sprintf("a-%d", n/2)))
	}
	errs := s.publish(s.t.Context(), msgs)
	s.checkAllOK(msgs, errs)
	got := s.received()
	s.checkAcked(msgs, errs, got)
	s.checkOrder(got)
}

func testFields(s *suite) {
	var g gen
	full := g.next("invoice", "inv-1")
	full.AggregateVersion = 7
	full.EventType = "invoice.issued"
	full.SchemaVersion = 3
	full.Topic = "billing.invoices"
	full.ContentType = "application/vnd.acme.invoice+json"
	full.Headers = map[string]string{"tenant": "acme", "x-request-id": "req-42", "empty": ""}
	full.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	minimal := g.next("customer", "c-1")
	minimal.AggregateVersion = 0
	minimal.Payload = []byte(`{}`)

	unicode := g.next("kunde", "ø-ü-東京-🙂")
	unicode.EventType = "kunde.geändert"
	unicode.Headers = map[string]string{"greeting": "grüß dich 🙂"}

	punctuation := g.next("order", `tenant:1/order 2?x=y&z="q"`)
	punctuation.EventType = "order.line-item.added"

	long := g.next("order", strings.Repeat("x", 1024))
	long.EventType = strings.Repeat("e", 255)
	long.AggregateVersion = 1<<53 + 1 // not exact as a float64
	long.SchemaVersion = 1<<31 - 1
	long.Headers = make(map[string]string)
	for i := range 20 {
		long.Headers[fmt.Sprintf("h-%02d", i)] = strings.Repeat(fmt.Sprint(i%10), 100)
	}

	msgs := []outbox.Message{full, minimal, unicode, punctuation, long}
	errs := s.publish(s.t.Context(), msgs)
	s.checkAllOK(msgs, errs)
	s.checkAcked(msgs, errs, s.received()) // received compares every field
}

func testPayloads(s *suite) {
	everyByte := make([]byte, 256)
	for i := range everyByte {
		everyByte[i] = byte(i)
	}
	size := LargePayloadBytes
	switch {
	case s.f.MaxPayloadBytes > 0:
		size = min(size, s.f.MaxPayloadBytes)
	case s.f.LargestPayloadBytes > 0:
		size = min(size, s.f.LargestPayloadBytes)
	}
	const binary = "application/octet-stream"
	var g gen
	var msgs []outbox.Message
	for _, p := range []struct {
		contentType string
		payload     []byte
	}{
		{binary, everyByte},
		{binary, []byte("\x00\x00\x00")},
		{binary, []byte("\xff\xfe\xfd not UTF-8 \xc3\x28")},
		{binary, []byte("line 1\r\nline 2\n\n")},
		{binary, nil},
		{binary, randomBytes(size)},
		{"application/x-protobuf", []byte{0x08, 0x96, 0x01, 0x12, 0x00}},
		{"text/plain; charset=utf-8", []byte("héllo, wörld 🙂")},
		{outbox.ContentTypeJSON, []byte(`{"html": "<a href=\"x\">&</a>", "n": 1.50, "u": "\u00e9", "list": [1, 2, 3]}`)},
		{"application/cloudevents+json", []byte(`"just a string"`)},
		{outbox.ContentTypeJSON, []byte(`null`)},
		{outbox.ContentTypeJSON, nil},
	} {
		m := g.next("blob", fmt.Sprintf("p-%d", len(msgs)))
		m.ContentType, m.Payload = p.contentType, p.payload
		msgs = append(msgs, m)
	}
	errs := s.publish(s.t.Context(), msgs)
	s.checkAllOK(msgs, errs)
	s.checkAcked(msgs, errs, s.received()) // received compares payloads
}

func testEmptyBatch(s *suite) {
	ctx := s.t.Context()
	s.publish(ctx, nil)
	s.publish(ctx, []outbox.Message{})
	if got := s.received(); len(got) != 0 {
		s.t.Errorf("broker holds %d messages after two empty batches", len(got))
	}
	var g gen
	msgs := []outbox.Message{g.next("order", "o-1")}
	errs := s.publish(ctx, msgs)
	s.checkAllOK(msgs, errs)
	s.checkAcked(msgs, errs, s.received())
}

func testCancelledContext(s *suite) {
	var g gen
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, g.next("order", fmt.Sprintf("o-%d", i%4)))
	}
	ctx, cancel := context.WithCancel(s.t.Context())
	cancel()
	errs := s.publishPromptly(ctx, msgs)
	var problems []string
	for i, err := range errs {
		if err == nil {
			problems = append(problems, fmt.Sprintf("message %d was acked, but ctx was cancelled before Publish was called", i))
		}
	}
	s.report(problems)
	s.checkAcked(msgs, errs, s.received())

	// The cancellation did not break the sink.
	retry := again(msgs)
	errs = s.publish(s.t.Context(), retry)
	s.checkAllOK(retry, errs)
	got := s.received()
	s.checkAcked(retry, errs, got)
	s.checkOrder(got)
}

func testFailureStopsAggregate(s *suite) {
	if s.h.FailWhen == nil {
		s.t.Skip("the harness cannot make its broker refuse a message (Harness.FailWhen is nil)")
	}
	ctx := s.t.Context()
	// o-1's third message is refused; o-2 and customer/o-1 are other aggregates.
	var g gen
	var msgs, stopped []outbox.Message
	for i := range 5 {
		m := g.next("order", "o-1")
		msgs = append(msgs, m, g.next("order", "o-2"))
		if i == 2 {
			msgs = append(msgs, g.next("customer", "o-1"))
		}
		if i >= 2 {
			stopped = append(stopped, m)
		}
	}
	refused := stopped[0]
	s.h.FailWhen(func(m outbox.Message) bool { return m.ID == refused.ID })
	errs := s.publish(ctx, msgs)

	mustFail := ids(stopped)
	var problems []string
	for i, m := range msgs {
		switch err := errs[i]; {
		case m.ID == refused.ID && err == nil:
			problems = append(problems, fmt.Sprintf("message %d was acked, but the broker refused it", i))
		case m.ID == refused.ID && outbox.IsUnavailable(err):
			problems = append(problems, fmt.Sprintf("the broker refused message %d alone, but the sink reported itself unavailable: %v", i, err))
		case mustFail[m.ID] && err == nil:
			problems = append(problems, fmt.Sprintf("message %d (seq %d of %s) was acked, but seq %d of its aggregate failed before it", i, m.Seq, aggregateOf(m), refused.Seq))
		case !mustFail[m.ID] && err != nil:
			problems = append(problems, fmt.Sprintf("message %d (seq %d of %s) failed, but only seq %d of %s was refused: %v", i, m.Seq, aggregateOf(m), refused.Seq, aggregateOf(refused), err))
		}
	}
	s.report(problems)
	got := s.received()
	s.checkAcked(msgs, errs, got)
	s.checkOrder(got)
	s.checkNotHeld(stopped, got, fmt.Sprintf("the broker refused seq %d of that aggregate: a consumer would see it out of order", refused.Seq))

	// The broker takes everything again: the retry arrives, in order.
	s.h.FailWhen(nil)
	retry := again(stopped)
	errs = s.publish(ctx, retry)
	s.checkAllOK(retry, errs)
	got = s.received()
	s.checkAcked(retry, errs, got)
	s.checkOrder(got)
}

func testResultsLineUp(s *suite) {
	if s.h.FailWhen == nil {
		s.t.Skip("the harness cannot make its broker refuse a message (Harness.FailWhen is nil)")
	}
	// Every message is its own aggregate; the refusals are irregular, so results in
	// any other order (reversed, sorted by aggregate) do not match.
	refusedAt := map[int]bool{0: true, 3: true, 4: true, 9: true, 15: true, 16: true, 22: true}
	var g gen
	var msgs, refused []outbox.Message
	for i := range 30 {
		m := g.next("order", fmt.Sprintf("r-%02d", i*7%30))
		msgs = append(msgs, m)
		if refusedAt[i] {
			refused = append(refused, m)
		}
	}
	refuse := ids(refused)
	s.h.FailWhen(func(m outbox.Message) bool { return refuse[m.ID] })
	errs := s.publish(s.t.Context(), msgs)
	var problems []string
	for i, err := range errs {
		switch {
		case refusedAt[i] && err == nil:
			problems = append(problems, fmt.Sprintf("result %d is nil, but the broker refused message %d", i, i))
		case refusedAt[i] && outbox.IsUnavailable(err):
			problems = append(problems, fmt.Sprintf("the broker refused message %d alone, but the sink reported itself unavailable: %v", i, err))
		case !refusedAt[i] && err != nil:
			problems = append(problems, fmt.Sprintf("result %d is an error, but the broker took message %d: %v", i, i, err))
		}
	}
	s.report(problems)
	got := s.received()
	s.checkAcked(msgs, errs, got)
	s.checkNotHeld(refused, got, "the broker refused it")
}

func testPayloadTooLarge(s *suite) {
	limit := s.f.MaxPayloadBytes
	if limit <= 0 {
		s.t.Skip("the broker has no payload limit (Features.MaxPayloadBytes is 0)")
	}
	var g gen
	blob := func(id string, size int) outbox.Message {
		m := g.next("blob", id)
		m.ContentType, m.Payload = "application/octet-stream", randomBytes(size)
		return m
	}
	fits, over, after, other := blob("b-1", limit), blob("b-2", limit+1), blob("b-2", 10), blob("b-3", 10)
	msgs := []outbox.Message{fits, over, after, other}
	errs := s.publish(s.t.Context(), msgs)
	if errs[0] != nil {
		s.t.Errorf("a payload of exactly MaxPayloadBytes (%d) failed: %v", limit, errs[0])
	}
	if !outbox.IsPermanent(errs[1]) {
		s.t.Errorf("a payload of MaxPayloadBytes+1 must fail with an error marked outbox.Permanent, got %v", errs[1])
	}
	if errs[2] == nil {
		s.t.Error("the message after the too-large one in its aggregate was acked")
	}
	if errs[3] != nil {
		s.t.Errorf("a small message of another aggregate failed: %v", errs[3])
	}
	got := s.received()
	s.checkAcked(msgs, errs, got)
	s.checkNotHeld([]outbox.Message{over, after}, got, "it was too large or followed one that was")
}

func testFailureMidBatch(s *suite) {
	if s.h.FailWhen == nil {
		s.t.Skip("the harness cannot make its broker refuse a message (Harness.FailWhen is nil)")
	}
	// 8 aggregates of 25 messages, interleaved; aggregates 1, 4 and 6 are refused at
	// their 12th message, so 13 more of each are in flight behind the refusal in a sink
	// that pipelines.
	const aggregates, perAggregate, refusedAt = 8, 25, 12
	refusedAgg := map[int]bool{1: true, 4: true, 6: true}
	var g gen
	var msgs, stopped []outbox.Message
	refuse := make(map[uuid.UUID]bool)
	for i := range perAggregate {
		for a := range aggregates {
			m := g.next("order", fmt.Sprintf("m-%d", a))
			msgs = append(msgs, m)
			if refusedAgg[a] && i+1 >= refusedAt {
				stopped = append(stopped, m)
				if i+1 == refusedAt {
					refuse[m.ID] = true
				}
			}
		}
	}
	s.h.FailWhen(func(m outbox.Message) bool { return refuse[m.ID] })
	errs := s.publish(s.t.Context(), msgs)
	s.h.FailWhen(nil)
	mustFail := ids(stopped)
	var problems []string
	for i, m := range msgs {
		switch err := errs[i]; {
		case refuse[m.ID] && outbox.IsUnavailable(err):
			problems = append(problems, fmt.Sprintf("the broker refused message %d alone, but the sink reported itself unavailable: %v", i, err))
		case mustFail[m.ID] && err == nil:
			problems = append(problems, fmt.Sprintf("message %d (seq %d of %s) was acked, but an earlier message of its aggregate was refused", i, m.Seq, aggregateOf(m)))
		case !mustFail[m.ID] && err != nil:
			problems = append(problems, fmt.Sprintf("message %d (seq %d of %s) failed, but its aggregate had no refusal before it: %v", i, m.Seq, aggregateOf(m), err))
		}
	}
	s.report(problems)
	got := s.received()
	s.checkAcked(msgs, errs, got)
	s.checkOrder(got)
	s.checkNotHeld(stopped, got, "an earlier message of its aggregate was refused: a consumer would see a gap")
}

// HeaderValueLimitBytes is the size of the over-long header value the HeaderValues
// check sends: over what AMQP's default frame and most brokers' header limits take.
const HeaderValueLimitBytes = 200 << 10

func testHeaderValues(s *suite) {
	var g gen
	other := outbox.NewID()
	hostile := []map[string]string{
		{"x-inject": "v\r\nid: " + other.String()},
		{"x-inject": "v\nNats-Msg-Id: " + other.String()},
		{"x-nul": "a\x00b"},
		{"x-bell": "a\ab"},
		{"id": other.String()},
		{"ID": other.String()},
		{"message-id": other.String()},
		{"Nats-Msg-Id": other.String()},
		{"Content-Type": "text/evil"},
		{"ce_id": other.String(), "ce-id": other.String()},
		{"x-long": strings.Repeat("v", HeaderValueLimitBytes)},
		{"bad name": "v"},
		{"bad:name": "v"},
	}
	var msgs, probes []outbox.Message
	for i, h := range hostile {
		m := g.next("header", fmt.Sprintf("h-%d", i))
		m.Headers = h
		msgs = append(msgs, m)
	}
	for i := range 4 {
		m := g.next("plain", fmt.Sprintf("p-%d", i))
		m.Headers = map[string]string{"tenant": "acme", "tab": "a\tb"}
		msgs = append(msgs, m)
		probes = append(probes, m)
	}
	errs := s.publish(s.t.Context(), msgs)
	var problems []string
	var refused []outbox.Message
	for i, m := range msgs[:len(hostile)] {
		switch err := errs[i]; {
		case err == nil:
		case outbox.IsPermanent(err):
			refused = append(refused, m)
		default:
			problems = append(problems, fmt.Sprintf("message %d with headers %.80q failed, neither delivered nor refused as permanent (retrying cannot help): %v", i, m.Headers, err))
		}
	}
	s.report(problems)
	s.checkAllOK(probes, errs[len(hostile):])
	got := s.received() // compares every header of what arrived, and refuses unknown ids
	s.checkAcked(msgs, errs, got)
	s.checkNotHeld(refused, got, "the sink refused it")
}

func testMessageIDs(s *suite) {
	if s.h.MessageIDs == nil {
		s.t.Skip("the broker has no message id field to check (Harness.MessageIDs is nil)")
	}
	var g gen
	var msgs []outbox.Message
	for i := range 10 {
		msgs = append(msgs, g.next("order", fmt.Sprintf("i-%d", i%3)))
	}
	errs := s.publish(s.t.Context(), msgs)
	s.checkAllOK(msgs, errs)
	got := s.received()
	s.checkAcked(msgs, errs, got)
	ctx, cancel := context.WithTimeout(s.t.Context(), readTimeout)
	defer cancel()
	brokerIDs, err := s.h.MessageIDs(ctx)
	if err != nil {
		s.t.Fatalf("MessageIDs: %v", err)
	}
	byBroker := make(map[string]int)
	for _, id := range brokerIDs {
		byBroker[id]++
	}
	var problems []string
	for _, m := range got {
		if byBroker[m.ID.String()] == 0 {
			problems = append(problems, fmt.Sprintf("the broker holds event %s, but not under that message id (its message ids: %.200q)", m.ID, brokerIDs))
		}
	}
	if len(brokerIDs) != len(got) {
		problems = append(problems, fmt.Sprintf("the broker holds %d messages but %d message ids", len(got), len(brokerIDs)))
	}
	s.report(problems)
}

const (
	// defaultOutageTimeout is Harness.OutageTimeout's default.
	defaultOutageTimeout = 30 * time.Second
	// shortDeadline is the ctx deadline of the Outage check's second call.
	shortDeadline = 300 * time.Millisecond
	// retryEvery is how often the Outage check retries once the broker is back, as the
	// relay's breaker probes.
	retryEvery = 100 * time.Millisecond
)

func testOutage(s *suite) {
	if s.h.SetDown == nil {
		s.t.Skip("the harness cannot take its broker down (Harness.SetDown is nil)")
	}
	timeout := cmp.Or(s.h.OutageTimeout, defaultOutageTimeout)
	ctx := s.t.Context()
	var g gen
	warm := []outbox.Message{g.next("order", "w-1"), g.next("order", "w-2")}
	errs := s.publish(ctx, warm)
	s.checkAllOK(warm, errs)

	s.h.SetDown(true)
	up := false
	defer func() {
		if !up {
			s.h.SetDown(false)
		}
	}()
	var down, short []outbox.Message
	for i := range 12 {
		down = append(down, g.next("order", fmt.Sprintf("d-%d", i%4)))
	}
	for i := range 4 {
		short = append(short, g.next("order", fmt.Sprintf("s-%d", i)))
	}
	var problems []string
	for i, err := range s.publishWithin(ctx, down, timeout, "the broker is unreachable") {
		if !outbox.IsUnavailable(err) {
			problems = append(problems, fmt.Sprintf("message %d with the broker unreachable: %v, want an error marked outbox.Unavailable (the relay would count an attempt, and in the end a dead letter)", i, err))
		}
	}
	sctx, cancel := context.WithTimeout(ctx, shortDeadline)
	defer cancel()
	for i, err := range s.publishWithin(sctx, short, shortDeadline+promptly, "its ctx has a short deadline and the broker is unreachable") {
		if !outbox.IsUnavailable(err) && (sctx.Err() == nil || !errors.Is(err, sctx.Err())) {
			problems = append(problems, fmt.Sprintf("message %d with the broker unreachable and a %v deadline: %v, want an error marked outbox.Unavailable, or the ctx's error once it ended", i, shortDeadline, err))
		}
	}
	s.report(problems)
	outage := append(slices.Clone(down), short...)
	s.checkNotHeld(outage, s.received(), "the broker was unreachable when it was published")

	s.h.SetDown(false)
	up = true
	retry := again(outage)
	s.publishUntilAcked(ctx, retry, timeout)
	got := s.received()
	s.checkAcked(retry, make([]error, len(retry)), got)
	s.checkOrder(got)
}

func testConcurrent(s *suite) {
	const goroutines, calls, perCall, aggregates = 8, 5, 20, 3
	var g gen
	batches := make([][][]outbox.Message, goroutines)
	for gi := range batches {
		for range calls {
			var msgs []outbox.Message
			for i := range perCall {
				msgs = append(msgs, g.next("order", fmt.Sprintf("g%d-a%d", gi, i%aggregates)))
			}
			batches[gi] = append(batches[gi], msgs)
		}
	}
	// Record every message first, and call the sink alone in the goroutines: the
	// suite's own locking must not order the sink's memory accesses for the race
	// detector.
	before := make([][][]uuid.UUID, goroutines)
	for gi := range batches {
		for _, msgs := range batches[gi] {
			before[gi] = append(before[gi], s.record(msgs))
		}
	}
	results := make([][][]error, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for gi := range batches {
		wg.Go(func() {
			<-start
			for _, msgs := range batches[gi] {
				results[gi] = append(results[gi], s.h.Sink.Publish(s.t.Context(), msgs))
			}
		})
	}
	close(start)
	wg.Wait()
	var all []outbox.Message
	var allErrs []error
	for gi := range batches {
		for c, msgs := range batches[gi] {
			errs := s.checkShape(msgs, before[gi][c], results[gi][c])
			s.checkAllOK(msgs, errs)
			all, allErrs = append(all, msgs...), append(allErrs, errs...)
		}
	}
	got := s.received()
	s.checkAcked(all, allErrs, got)
	s.checkOrder(got)
}

// gen makes test messages: unique ids, Seq in write order, a version per aggregate.
type gen struct {
	seq      int64
	versions map[aggregate]int64
}

func (g *gen) next(typ, id string) outbox.Message {
	if g.versions == nil {
		g.versions = make(map[aggregate]int64)
	}
	g.seq++
	k := aggregate{typ, id}
	g.versions[k]++
	return outbox.Message{
		ID:               outbox.NewID(),
		Seq:              g.seq,
		AggregateType:    typ,
		AggregateID:      id,
		AggregateVersion: g.versions[k],
		EventType:        typ + ".changed",
		SchemaVersion:    1,
		ContentType:      outbox.ContentTypeJSON,
		Payload:          fmt.Appendf(nil, `{"seq": %d}`, g.seq),
		CreatedAt:        time.Now().UTC(),
		Attempt:          1,
	}
}

// again returns msgs as the relay would publish them on their next attempt.
func again(msgs []outbox.Message) []outbox.Message {
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		m.Attempt++
		out[i] = m
	}
	return out
}

// rng is a small deterministic generator (xorshift64): every run sends the same data.
type rng uint64

func (r *rng) next() uint64 {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = rng(x)
	return x
}

func randomBytes(n int) []byte {
	r := rng(n + 1)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.next())
	}
	return b
}
