package redissink_test

import (
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// prefixed routes an event with a Topic under prefix (a Topic cannot hold the
// prefix's ":").
func prefixed(sink outbox.Sink, prefix string) outbox.Sink {
	return sinktest.Reroute(sink, func(m outbox.Message) string {
		if m.Topic != "" {
			return prefix + m.Topic
		}
		return ""
	})
}

// 1,000 events over 50 aggregates go through the relay to the machine's Redis and
// come back, read with a plain go-redis XRANGE, once each, intact, in order per
// aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	admin := connect(t, machineAddr)
	prefix := newPrefix(t, admin)
	sink, err := redissink.New(admin, &redissink.Config{Stream: prefix + "{{.AggregateType}}"})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RelayDelivers(t, sinktest.PoolRelayHarness(pgtest.Pool(t), sink, reader(admin, prefix), nil))
}

// With Redis out of reach (a proxy stopped in between) no event has an attempt
// counted or goes dead; once it is back everything arrives.
func TestRelayOutage(t *testing.T) {
	t.Parallel()
	admin := connect(t, machineAddr)
	prefix := newPrefix(t, admin)
	p := newProxy(t, machineAddr)
	sink, err := redissink.New(connect(t, p.Listen), &redissink.Config{Stream: prefix + "{{.AggregateType}}"})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RelayOutage(t, sinktest.PoolRelayHarness(pgtest.Pool(t), sink, reader(admin, prefix), sinktest.ProxySetDown(t, p)))
}

// An event routed to a key that holds a string is dead at once with Redis's
// WRONGTYPE error as its reason; the other aggregates flow.
func TestRelayWrongTypeIsDead(t *testing.T) {
	t.Parallel()
	admin := connect(t, machineAddr)
	prefix := newPrefix(t, admin)
	if err := admin.Set(t.Context(), prefix+"taken", "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	sink, err := redissink.New(admin, &redissink.Config{Stream: prefix + "{{.AggregateType}}"})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RelayRejects(t, sinktest.PoolRelayHarness(pgtest.Pool(t), prefixed(sink, prefix), reader(admin, prefix), nil),
		func(e *outbox.Event) { e.Topic = "taken" }, "WRONGTYPE", `"`+prefix+`taken"`)
}
