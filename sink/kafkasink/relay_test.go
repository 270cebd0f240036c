package kafkasink_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
)

func newSink(t *testing.T, cfg *kafkasink.Config) *kafkasink.Sink {
	t.Helper()
	s, err := kafkasink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// reader reads the topics starting with prefix with a plain franz-go consumer.
func reader(seeds []string, prefix string) func(context.Context) ([]outbox.Message, error) {
	return func(ctx context.Context) ([]outbox.Message, error) {
		msgs, _, err := readTopics(ctx, seeds, prefix)
		return msgs, err
	}
}

// 1,000 events over 50 aggregates go through the relay to Kafka and come back, read
// by a plain franz-go consumer and by kcat, once each, intact, in order per aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	seeds := newCluster(t).ListenAddrs()
	sink := newSink(t, &kafkasink.Config{Options: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation()}})
	want := sinktest.RelayDelivers(t, relayHarness(t, sink, reader(seeds, "outbox.event."), nil))
	sinktest.CheckDelivered(t, want, kcat(t, seeds[0], "outbox.event.order"), true)
}

// kcatRecord is a record as kcat -J prints it.
type kcatRecord struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Key       string   `json:"key"`
	Payload   string   `json:"payload"`
	Headers   []string `json:"headers"` // name, value, name, value, …
}

// kcat reads topic from its start to its end with kcat (librdkafka), an independent
// client, and decodes its records.
func kcat(t *testing.T, broker, topic string) []outbox.Message {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is not installed (apt-get install kcat; .ci/run installs it)")
	}
	cmd := exec.CommandContext(t.Context(), path, "-b", broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-J")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.String())
	}
	var msgs []outbox.Message
	for line := range bytes.Lines(out) {
		var r kcatRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("kcat printed %q: %v", line, err)
		}
		var hs []sinkformat.Header
		for i := 0; i+1 < len(r.Headers); i += 2 {
			hs = append(hs, sinkformat.Header{Name: r.Headers[i], Value: r.Headers[i+1]})
		}
		m, err := sinkformat.Decode(sinkformat.Kafka, hs, []byte(r.Payload))
		if err != nil {
			t.Fatalf("kcat record %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if r.Key != m.AggregateID {
			t.Errorf("kcat record %s/%d@%d: key %q, aggregate id %q", r.Topic, r.Partition, r.Offset, r.Key, m.AggregateID)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// With the cluster out of reach (a proxy stopped in between), the backlog grows and
// no event has an attempt counted or goes dead; once the proxy is back, everything
// arrives, at least once, in order of first delivery per aggregate.
func TestRelayOutage(t *testing.T) {
	t.Parallel()
	seeds := newCluster(t).ListenAddrs()
	p := newProxy(t, seeds[0])
	sink := newSink(t, &kafkasink.Config{
		Options:         []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation(), viaProxy(p.Listen)},
		DeliveryTimeout: time.Second, AckTimeout: 3 * time.Second, PingTimeout: 500 * time.Millisecond,
	})
	sinktest.RelayOutage(t, relayHarness(t, sink, reader(seeds, "outbox.event."), proxySetDown(t, p)))
}

// A record over the topic's max.message.bytes (kfake enforces it per batch) is dead at
// once with a readable reason; the records batched with it, and the other
// aggregates, are delivered.
func TestRelayTooLargeIsDead(t *testing.T) {
	t.Parallel()
	seeds := newCluster(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "20000"}), kfake.DefaultNumPartitions(1)).ListenAddrs()
	sink := newSink(t, &kafkasink.Config{Options: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation()}})
	sinktest.RelayRejects(t, relayHarness(t, sink, reader(seeds, "outbox.event."), nil), func(e *outbox.Event) {
		// Random bytes: the producer compresses batches, and the limit is on what is sent.
		e.ContentType, e.Payload = "application/octet-stream", make([]byte, 30000)
		_, _ = rand.Read(e.Payload)
	}, "MESSAGE_TOO_LARGE")
}
