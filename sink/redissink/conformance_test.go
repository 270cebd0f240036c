package redissink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// harness builds a sink on keys of its own prefix of the machine's Redis, through a
// proxy the suite can take down. FailWhen routes the refused messages to a key that
// holds a string, which Redis refuses with WRONGTYPE.
func harness(dedup bool) func(t *testing.T) sinktest.Harness {
	return func(t *testing.T) sinktest.Harness {
		admin := connect(t, machineAddr)
		prefix := newPrefix(t, admin)
		if err := admin.Set(t.Context(), prefix+"not-a-stream", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		p := newProxy(t, machineAddr)
		sink, err := redissink.New(connect(t, p.Listen), &redissink.Config{Stream: prefix + "{{.AggregateType}}", Dedup: dedup})
		if err != nil {
			t.Fatal(err)
		}
		var refusals sinktest.Refusals
		return sinktest.Harness{
			Sink: sinktest.Reroute(sink, func(m outbox.Message) string {
				switch {
				case refusals.Refused(m):
					return prefix + "not-a-stream"
				case m.Topic != "":
					return prefix + m.Topic
				}
				return ""
			}),
			Received: func(ctx context.Context) ([]outbox.Message, error) {
				msgs, _, err := read(ctx, admin, prefix)
				return msgs, err
			},
			MessageIDs: func(ctx context.Context) ([]string, error) {
				_, ids, err := read(ctx, admin, prefix)
				return ids, err
			},
			FailWhen:      refusals.Set,
			SetDown:       sinktest.ProxySetDown(t, p),
			OutageTimeout: 15 * time.Second,
		}
	}
}

// ordersSink returns a sink with cfg adding to the stream "orders" under a prefix of
// t's own, and that prefix.
func ordersSink(t *testing.T, admin *redis.Client, cfg redissink.Config) (string, *redissink.Sink) {
	t.Helper()
	prefix := newPrefix(t, admin)
	cfg.Stream = prefix + "orders"
	sink, err := redissink.New(admin, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return prefix, sink
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, harness(false), sinktest.Features{})
}

func TestConformanceDedup(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, harness(true), sinktest.Features{})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := connect(t, machineAddr)
	for _, tc := range []struct {
		cfg  *redissink.Config
		want string
	}{
		{&redissink.Config{MaxLen: -1}, "MaxLen"},
		{&redissink.Config{DedupWindow: time.Microsecond}, "DedupWindow"},
		{&redissink.Config{Stream: "{{.AgregateType}}"}, "Stream"},
		{&redissink.Config{Format: "xml"}, "Format"},
	} {
		if _, err := redissink.New(c, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := redissink.New(nil, nil); err == nil {
		t.Error("New without a client: no error")
	}
}

// Without Dedup a republish is stored again (Redis 7.0 has no idempotent XADD); with
// it, once — each republish acked.
func TestDedupStoresARepublishOnce(t *testing.T) {
	t.Parallel()
	admin := connect(t, machineAddr)
	for _, dedup := range []bool{false, true} {
		prefix, sink := ordersSink(t, admin, redissink.Config{Dedup: dedup})
		m := message("o-1")
		for attempt := 1; attempt <= 3; attempt++ {
			m.Attempt = attempt
			if err := sink.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
				t.Fatalf("dedup %v, attempt %d: %v", dedup, attempt, err)
			}
		}
		want := int64(3)
		if dedup {
			want = 1
		}
		if n := admin.XLen(t.Context(), prefix+"orders").Val(); n != want {
			t.Errorf("dedup %v: the stream holds %d entries after 3 publishes of one event, want %d", dedup, n, want)
		}
	}
}

// With Dedup, an add Redis refused leaves no mark: once the key is a stream again, the
// retry is stored, not skipped as a duplicate.
func TestDedupFailedAddLeavesNoMark(t *testing.T) {
	t.Parallel()
	admin := connect(t, machineAddr)
	prefix, sink := ordersSink(t, admin, redissink.Config{Dedup: true})
	if err := admin.Set(t.Context(), prefix+"orders", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m := message("o-1")
	if err := sink.Publish(t.Context(), []outbox.Message{m})[0]; !outbox.IsPermanent(err) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("add to a string key: %v, want permanent WRONGTYPE", err)
	}
	admin.Del(t.Context(), prefix+"orders")
	m.Attempt = 2
	if err := sink.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	if n := admin.XLen(t.Context(), prefix+"orders").Val(); n != 1 {
		t.Fatalf("the stream holds %d entries, want the retried event once", n)
	}
}

// A server that lost its scripts (restart, SCRIPT FLUSH) gets the script again.
func TestDedupScriptReloaded(t *testing.T) {
	t.Parallel()
	admin := connect(t, machineAddr)
	prefix, sink := ordersSink(t, admin, redissink.Config{Dedup: true})
	for i := range 2 {
		if err := admin.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := sink.Publish(t.Context(), []outbox.Message{message("o-1"), message("o-2")}); err[0] != nil || err[1] != nil {
			t.Fatalf("publish %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	if n := admin.XLen(t.Context(), prefix+"orders").Val(); n != 4 {
		t.Fatalf("the stream holds %d entries, want 4", n)
	}
}

// MaxLen trims each stream to about that many entries, with and without Dedup.
func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	admin := connect(t, machineAddr)
	for _, dedup := range []bool{false, true} {
		prefix, sink := ordersSink(t, admin, redissink.Config{MaxLen: 10, Dedup: dedup})
		var msgs []outbox.Message
		for i := range 1000 {
			msgs = append(msgs, message(string(rune('a'+i%26))))
		}
		for _, err := range sink.Publish(t.Context(), msgs) {
			if err != nil {
				t.Fatal(err)
			}
		}
		// MAXLEN ~ trims whole macro nodes (100 entries by default): about 10, never 1,000.
		if n := admin.XLen(t.Context(), prefix+"orders").Val(); n < 10 || n > 200 {
			t.Errorf("dedup %v: the stream holds %d entries after 1,000 adds with MaxLen 10", dedup, n)
		}
	}
}

// In CloudEvents mode the entry has the id field too, beside ce_id.
func TestCloudEventsEntryHasID(t *testing.T) {
	t.Parallel()
	admin := connect(t, machineAddr)
	prefix, sink := ordersSink(t, admin, redissink.Config{Format: sinkformat.CloudEvents})
	m := message("o-1")
	if err := sink.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	entries, err := admin.XRange(t.Context(), prefix+"orders", "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("XRANGE: %v, %d entries", err, len(entries))
	}
	if v := entries[0].Values; v["id"] != m.ID.String() || v["ce_id"] != m.ID.String() || v["ce_specversion"] != "1.0" {
		t.Fatalf("entry fields %v", v)
	}
}
