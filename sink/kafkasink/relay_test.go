package kafkasink_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
)

const (
	published = `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`
	touched   = `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND (attempts > 0 OR dead_at IS NOT NULL OR last_error IS NOT NULL)`
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

// 1,000 events over 50 aggregates go through the relay to Kafka and come back, read
// by a plain franz-go consumer and by kcat, once each, intact, in order per aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	seeds := newCluster(t).ListenAddrs()
	sink := newSink(t, &kafkasink.Config{Options: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation()}})
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "e2e", 50, 20)
	runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want), published)

	got, _, err := readTopics(t.Context(), seeds, "outbox.event.")
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, want, got, true)
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
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "before", 10, 10)
	r := runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want), published)

	p.Stop()
	more := writeEvents(t, pool, "during", 20, 10)
	waitFor(t, 30*time.Second, "the breaker to open", func() bool { return r.Stats().BreakerOpens > 0 })
	time.Sleep(2 * time.Second) //nolint:forbidigo // the outage's length is the test's input
	if n := count(t, pool, published); n != len(want) {
		t.Fatalf("%d events published while the cluster was out of reach, want %d", n, len(want))
	}
	if n := count(t, pool, touched); n != 0 {
		t.Fatalf("%d events had an attempt counted or went dead during the outage", n)
	}

	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)
	waitCount(t, pool, time.Minute, len(want), published)
	got, _, err := readTopics(t.Context(), seeds, "outbox.event.")
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, want, got, false)
}

// A record over the topic's max.message.bytes (kfake enforces it per batch) is dead at
// once with a readable reason; the records batched with it, and the other
// aggregates, are delivered.
func TestRelayTooLargeIsDead(t *testing.T) {
	t.Parallel()
	seeds := newCluster(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "20000"}), kfake.DefaultNumPartitions(1)).ListenAddrs()
	sink := newSink(t, &kafkasink.Config{Options: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation()}})
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "ok", 20, 5)
	// Random bytes: the producer compresses batches, and the limit is on what is sent.
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET content_type = 'application/octet-stream', payload = NULL,
		payload_bytes = (SELECT decode(string_agg(lpad(to_hex((random() * 255)::int), 2, '0'), ''), 'hex') FROM generate_series(1, 30000))
		WHERE aggregate_id = 'ok-3' AND aggregate_version = 2`); err != nil {
		t.Fatal(err)
	}
	runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want)-4, published) // ok-3's versions 2 to 5 are held
	var lastError string
	var attempts int
	if err := pool.QueryRow(t.Context(), `SELECT last_error, attempts FROM outbox.events WHERE dead_at IS NOT NULL`).Scan(&lastError, &attempts); err != nil {
		t.Fatalf("the dead event: %v", err)
	}
	if attempts != 1 || !strings.Contains(lastError, "MESSAGE_TOO_LARGE") {
		t.Fatalf("dead after %d attempts with last_error %q, want 1 attempt and MESSAGE_TOO_LARGE", attempts, lastError)
	}
	var delivered []outbox.Message
	for _, m := range want {
		if m.AggregateID != "ok-3" || m.AggregateVersion < 2 {
			delivered = append(delivered, m)
		}
	}
	got, _, err := readTopics(t.Context(), seeds, "outbox.event.")
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, delivered, got, true)
}
