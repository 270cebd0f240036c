package outboxadmin_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// The overview and the status show each live relay's sink as its heartbeat reported it:
// down (the breaker open) while its sink refuses, up with its published count once the
// sink is back.
func TestOverviewShowsEachRelaysSink(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	sink.SetDown(true)
	r, err := relay.New(pool, sink, &relay.Config{
		PollInterval: 20 * time.Millisecond, LeaseTTL: time.Second, BreakerInitialDelay: 300 * time.Millisecond, BreakerMaxDelay: time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	enqueue(t, pool, "order.created", aggregates("o", 4), 1)
	h := newAdmin(t, pool, nil)
	relayOf := func() (outboxadmin.Relay, bool) {
		var st outboxadmin.Status
		callJSON(t, h, http.MethodGet, "/api/status", "", nil, http.StatusOK, &st)
		for _, rel := range st.Relays {
			if rel.Owner == r.Owner() {
				return rel, true
			}
		}
		return outboxadmin.Relay{}, false
	}
	waitFor(t, 10*time.Second, "the relay reported with its breaker open", func() bool {
		rel, ok := relayOf()
		return ok && rel.BreakerOpenUntil != nil && rel.BreakerOpens >= 1
	})
	// the sink is still down: the breaker stays open (waiting or probing) until a probe
	// succeeds, so the page says so however its probes are timed
	if html := page(t, h, "/"); !strings.Contains(html, `class="sink-down">down: breaker open, next probe`) {
		t.Fatalf("the overview does not show the sink down:\n%s", html)
	}
	sink.SetDown(false)
	waitFor(t, 15*time.Second, "the relay reported up, its 4 events published", func() bool {
		rel, ok := relayOf()
		return ok && rel.BreakerOpenUntil == nil && rel.Published == 4
	})
	if html := page(t, h, "/"); !strings.Contains(html, `class="sink-up">up</td><td class="num">4</td>`) {
		t.Fatalf("the overview does not show the sink up with 4 published:\n%s", html)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
