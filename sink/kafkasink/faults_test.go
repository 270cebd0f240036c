package kafkasink_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

func event(aggregateID string) outbox.Message {
	return outbox.Message{
		ID: outbox.NewID(), AggregateType: "order", AggregateID: aggregateID, EventType: "order.paid",
		SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, Payload: []byte(`{}`), Attempt: 1,
	}
}

// countIDs counts the records of topic per id header.
func countIDs(t *testing.T, seeds []string, topic string) map[string]int {
	t.Helper()
	_, ids, err := readTopics(t.Context(), seeds, topic)
	if err != nil {
		t.Fatal(err)
	}
	n := make(map[string]int)
	for _, id := range ids {
		n[id]++
	}
	return n
}

// A produce whose answer comes too late (the broker writes the record, the sink has
// stopped waiting) is an unknown result: a transient failure, not a permanent one nor
// an outage, since the cluster answers pings. The republish succeeds; the record is
// there at least once — a duplicate, never a loss.
func TestLateAckIsUnknownThenRepublished(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	seeds := c.ListenAddrs()
	sink := newSink(t, &kafkasink.Config{
		Options:    []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation()},
		AckTimeout: 300 * time.Millisecond,
	})
	release := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { c.SleepControl(func() { <-release }) })
		return nil, nil, false // then the cluster writes it as usual
	})
	m := event("o-1")
	err := sink.Publish(t.Context(), []outbox.Message{m})[0]
	if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
		t.Fatalf("a produce answered after the ack timeout: %v, want a transient error", err)
	}
	close(release)
	m.Attempt = 2
	if err := sink.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("the republish: %v", err)
	}
	if n := countIDs(t, seeds, "outbox.event.order")[m.ID.String()]; n < 1 {
		t.Fatalf("the event is not in the topic after its republish was acked")
	}
}

// syncBuffer is a concurrency-safe log buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// An OUT_OF_ORDER_SEQUENCE_NUMBER answer breaks the producer's idempotence state: the
// message is not acked, the client is rebuilt (a new producer id), and the next
// publish of the same event succeeds through it.
func TestOutOfOrderSequenceRebuildsTheClient(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	seeds := c.ListenAddrs()
	var logs syncBuffer
	sink := newSink(t, &kafkasink.Config{
		Options: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation()},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err := sink.Publish(t.Context(), []outbox.Message{event("o-0")})[0]; err != nil {
		t.Fatal(err)
	}
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.OutOfOrderSequenceNumber.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	m := event("o-1")
	err := sink.Publish(t.Context(), []outbox.Message{m})[0]
	if err == nil || outbox.IsPermanent(err) {
		t.Fatalf("a produce answered OUT_OF_ORDER_SEQUENCE_NUMBER: %v, want a failure to retry", err)
	}
	if !errors.Is(err, kerr.OutOfOrderSequenceNumber) || !outbox.IsUnavailable(err) {
		t.Fatalf("error %v, want OUT_OF_ORDER_SEQUENCE_NUMBER marked unavailable (the relay republishes from its table)", err)
	}
	if !strings.Contains(logs.String(), "rebuilt the client") {
		t.Fatalf("no rebuild logged:\n%s", logs.String())
	}
	m.Attempt = 2
	if err := sink.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("the republish through the rebuilt client: %v", err)
	}
	if n := countIDs(t, seeds, "outbox.event.order")[m.ID.String()]; n != 1 {
		t.Fatalf("the event is %d times in the topic, want once", n)
	}
}

// Adding partitions to a topic moves some aggregates to another partition: the sink
// warns (a consumer may read such an aggregate out of order around the change).
func TestPartitionCountChangeWarns(t *testing.T) {
	t.Parallel()
	seeds := newCluster(t).ListenAddrs()
	adm := newAdmin(t, seeds)
	createTopic(t, adm, "outbox.event.order", 2, nil)
	var logs syncBuffer
	sink := newSink(t, &kafkasink.Config{
		Options: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MetadataMaxAge(200 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond)},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err := sink.Publish(t.Context(), []outbox.Message{event("o-1")})[0]; err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreatePartitions(t.Context(), 1, "outbox.event.order"); err != nil {
		t.Fatal(err)
	}
	sinktest.WaitFor(t, 20*time.Second, "the partition count warning", func() bool {
		if err := sink.Publish(t.Context(), []outbox.Message{event("o-1")})[0]; err != nil {
			t.Fatal(err)
		}
		return strings.Contains(logs.String(), "partition count of a topic changed") && strings.Contains(logs.String(), "partitions_before=2 partitions=3")
	})
}
