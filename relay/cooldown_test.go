package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// cooldownConfig is fastConfig with a claim cooldown and polls rare enough that only the
// test's wake-ups bring claims.
func cooldownConfig(mode relay.Mode, cooldown time.Duration) *relay.Config {
	cfg := fastConfig()
	cfg.Mode = mode
	cfg.ClaimCooldown = cooldown
	cfg.PollInterval = 5 * time.Second
	cfg.FallbackPollInterval = 5 * time.Second
	cfg.Concurrency = 2 // two workers claiming, busy or not (ADR 0035), as the bounds count
	return cfg
}

// A trickle of events, each followed by a wake-up, gathers into about one claim per
// ClaimCooldown (each of the relay's two workers may take one), not one write
// transaction per wake-up; every event is still published. The same trickle without a
// cooldown is the control: it must cost more claims than the bound, or the bound proves
// nothing.
func TestTrickleClaimsGatherWithinTheCooldown(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, mode relay.Mode) {
		const cooldown = 100 * time.Millisecond
		gathered, window := trickleClaims(t, mode, cooldown)
		bound := 2 * (int64(window/cooldown) + 3)
		control, controlWindow := trickleClaims(t, mode, -1)
		t.Logf("cooldown %s: %d claims in %s (bound %d); no cooldown: %d claims in %s", cooldown, gathered, window, bound, control, controlWindow)
		if gathered > bound {
			t.Errorf("with ClaimCooldown %s: %d claims for a trickle of %s, want at most %d", cooldown, gathered, window, bound)
		}
		if control <= bound {
			t.Errorf("without a cooldown: %d claims, not more than the bound %d: the trickle does not test it", control, bound)
		}
	})
}

// trickleClaims runs a relay with cooldown on a fresh schema, writes 40 events one
// transaction each, 5 ms apart, waking the relay after each, and returns the claims the
// relay ran until all were published and how long that took.
func trickleClaims(t *testing.T, mode relay.Mode, cooldown time.Duration) (claims int64, window time.Duration) {
	t.Helper()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, cooldownConfig(mode, cooldown))
	stop := start(t, r)
	if mode == relay.Ordered {
		waitSQL(t, pool, 20*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
	}
	enqueue(t, pool, []string{"first"}, 1)
	r.Wake()
	waitFor(t, sink, 10*time.Second, "the first event", distinct(1))
	time.Sleep(200 * time.Millisecond) //nolint:forbidigo // past the first claim's cooldown
	before := r.Stats().Claims
	began := time.Now()
	const events = 40
	for i := range events {
		enqueue(t, pool, []string{fmt.Sprintf("t%d", i)}, 1)
		r.Wake()
		time.Sleep(5 * time.Millisecond) //nolint:forbidigo // the trickle's spacing
	}
	waitFor(t, sink, 10*time.Second, "the trickle", distinct(1+events))
	window = time.Since(began)
	claims = r.Stats().Claims - before
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return claims, window
}

// A backlog is claimed back to back: the cooldown applies only after a claim that took
// less than it may. With a cooldown of 1 s before every claim, 300 events in batches of
// 10 would take 30 s.
func TestCooldownDoesNotSlowABacklog(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, mode relay.Mode) {
		pool := pgtest.Pool(t)
		enqueue(t, pool, aggregates("b", 30), 10)
		sink := &memsink.Sink{}
		cfg := cooldownConfig(mode, time.Second)
		cfg.BatchSize, cfg.MaxPerAggregate = 10, 1
		r := newRelay(t, pool, sink, cfg)
		began := time.Now()
		start(t, r)
		r.Wake()
		msgs := waitFor(t, sink, 8*time.Second, "the backlog", distinct(300))
		t.Logf("%d claims, %s", r.Stats().Claims, time.Since(began))
		if mode == relay.Ordered {
			checkOrder(t, msgs)
		}
	})
}

// An event after a quiet spell longer than the cooldown is claimed at once: the
// cooldown runs from the last claim, not from the wake-up.
func TestCooldownDoesNotDelayAnEventAfterAQuietSpell(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, mode relay.Mode) {
		pool := pgtest.Pool(t)
		sink := &memsink.Sink{}
		const cooldown = 2 * time.Second
		r := newRelay(t, pool, sink, cooldownConfig(mode, cooldown))
		start(t, r)
		enqueue(t, pool, []string{"first"}, 1) // its claim starts the cooldown
		r.Wake()
		waitFor(t, sink, 20*time.Second, "the first event", distinct(1))
		time.Sleep(cooldown + 200*time.Millisecond) //nolint:forbidigo // the quiet spell
		enqueue(t, pool, []string{"quiet"}, 1)
		began := time.Now()
		r.Wake()
		waitFor(t, sink, cooldown/2, "the event after the quiet spell", distinct(2))
		t.Logf("published %s after the wake-up", time.Since(began))
	})
}
