package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// 1,000 events over 50 aggregates go through the relay to a real endpoint that
// verifies each signature with the standard-webhooks library: each once, intact, in
// order per aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	sink := newSink(t, e, e.addr(), nil)
	sinktest.RelayDelivers(t, sinktest.PoolRelayHarness(pgtest.Pool(t), sink, e.received, nil))
}

// With the endpoint out of reach (a proxy stopped in between) the backlog grows and no
// event has an attempt counted or goes dead; once it is back everything arrives.
func TestRelayOutage(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	p := newProxy(t, e.addr())
	sink := newSink(t, e, p.Listen, nil)
	sinktest.RelayOutage(t, sinktest.PoolRelayHarness(pgtest.Pool(t), sink, e.received, sinktest.ProxySetDown(t, p)))
}

// An event the endpoint answers 410 Gone is dead at once with the status in its
// reason; the other aggregates flow.
func TestRelayGoneIsDead(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	e.answer = func(w http.ResponseWriter, _ *http.Request, req request) bool {
		if req.msg.Headers["x-gone"] != "" {
			http.Error(w, "this hook was removed", http.StatusGone)
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	sink := newSink(t, e, e.addr(), nil)
	sinktest.RelayRejects(t, sinktest.PoolRelayHarness(pgtest.Pool(t), sink, e.received, nil),
		func(ev *outbox.Event) { ev.Headers["x-gone"] = "1" }, "410 Gone", "this hook was removed")
}

// A 429 with Retry-After: 2 makes the relay wait 2 s before the next attempt, though
// its own backoff is 20 ms.
func TestRelayHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	e.answer = func(w http.ResponseWriter, _ *http.Request, req request) bool {
		if len(e.requests(true)) == 1 { // the first attempt
			w.Header().Set("Retry-After", "2")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	sink := newSink(t, e, e.addr(), nil)
	h := sinktest.PoolRelayHarness(pgtest.Pool(t), sink, e.received, nil)
	ev := outbox.Event{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.paid", Payload: []byte(`{}`)}
	if err := h.Enqueue(t.Context(), []outbox.Event{ev}); err != nil {
		t.Fatal(err)
	}
	cfg := sinktest.RelayConfig()
	h.Start(t, cfg)
	h.WaitPublished(t, 1)
	all := e.requests(true)
	if len(all) != 2 {
		t.Fatalf("%d requests, want 2", len(all))
	}
	// The relay counts the pause from its claim (the transaction's now()), a little
	// before the request: allow for that, far above its own 20 ms backoff.
	if gap := all[1].at.Sub(all[0].at); gap < 1500*time.Millisecond || gap > 2*time.Second+cfg.RetryMaxDelay+5*time.Second {
		t.Fatalf("the retry came %s after the 429 with Retry-After: 2 (relay backoff %s)", gap, cfg.RetryBaseDelay)
	}
	if all[0].id != all[1].id || all[0].id != ev.ID.String() {
		t.Fatalf("webhook-ids %s and %s, want the event id %s on both", all[0].id, all[1].id, ev.ID)
	}
}
