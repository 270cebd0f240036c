package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// A pause holds its scope in every relay of the schema from its commit on — running
// relays included, in both modes — while the rest flows; after the resume the held
// events go out, in order per aggregate, and nothing is lost.
func TestPauseHoldsItsScopeInEveryRelay(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		for _, tc := range []struct {
			scope relay.PauseScope
			held  string // SQL condition on events: what the pause holds
		}{
			{relay.PauseScope{Kind: relay.PauseAll}, `true`},
			{relay.PauseScope{Kind: relay.PauseAggregateType, AggregateType: "payment"}, `aggregate_type = 'payment'`},
			// enqueued first: the paused rows lie below the ones that flow, and are stepped over
			{relay.PauseScope{Kind: relay.PauseAggregateType, AggregateType: "order"}, `aggregate_type = 'order'`},
			{relay.PauseScope{Kind: relay.PausePartition, Partition: 1}, `partition * 4 / 4096 = 1`},
		} {
			t.Run(fmt.Sprintf("%s/%s", mode, tc.scope), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				pool := pgtest.Pool(t)
				sink := &memsink.Sink{}
				for range 2 {
					cfg := fastConfig()
					cfg.Mode, cfg.Partitions = mode, 4
					start(t, newRelay(t, pool, sink, cfg))
				}
				// the relays run (and have recorded their partition count) before the pause
				enqueueTyped(t, pool, "order", aggregates("warmup", 4), 1)
				waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
				p, made, err := relay.Pause(ctx, pool, relay.PauseRequest{Scope: tc.scope, Actor: "test", Reason: "broker maintenance"})
				if err != nil || !made {
					t.Fatalf("Pause: made %v, %v", made, err)
				}
				if p.Scope != tc.scope || p.By != "test" || p.Reason != "broker maintenance" || p.ResumedAt != nil {
					t.Fatalf("Pause returned %+v", p)
				}
				enqueueTyped(t, pool, "order", aggregates("o", 20), 5)
				enqueueTyped(t, pool, "payment", aggregates("p", 20), 5)
				held := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND `+tc.held)
				if held == 0 || held == 200 && tc.scope.Kind != relay.PauseAll {
					t.Fatalf("the test's scope holds %d of 200 events: pick another", held)
				}
				if tc.scope.Kind != relay.PauseAll {
					waitSQL(t, pool, 10*time.Second, held, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
				}
				throughout(time.Second, func() {
					if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL AND `+tc.held+` AND aggregate_id NOT LIKE 'warmup%'`); n != 0 {
						t.Fatalf("%d events of the paused %s were published", n, tc.scope)
					}
				})
				r, err := relay.Resume(ctx, pool, relay.PauseRequest{Scope: tc.scope, Actor: "test", Reason: "done"})
				if err != nil || r.ID != p.ID || r.ResumedBy != "test" || r.ResumeReason != "done" || r.ResumedAt == nil {
					t.Fatalf("Resume: %+v, %v", r, err)
				}
				waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
				if mode == relay.Ordered {
					checkOrder(t, sink.Messages())
				}
				if n := distinctIDs(sink.Messages()); n != 204 {
					t.Fatalf("%d distinct events published, want 204", n)
				}
			})
		}
	}
}

// Pausing a paused scope changes nothing and says so; resuming one that is not paused
// is refused; a bad scope is refused by name, before the database is asked; resuming
// one scope leaves another paused; every pause stays listed, with its resume.
func TestPauseRequestsAndTheirRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	order := relay.PauseScope{Kind: relay.PauseAggregateType, AggregateType: "order"}
	all := relay.PauseScope{Kind: relay.PauseAll}
	first, made, err := relay.Pause(ctx, pool, relay.PauseRequest{Scope: order, Actor: "ann", Reason: "r1"})
	if err != nil || !made {
		t.Fatal(made, err)
	}
	again, made, err := relay.Pause(ctx, pool, relay.PauseRequest{Scope: order, Actor: "bob", Reason: "r2"})
	if err != nil || made || again.ID != first.ID || again.By != "ann" {
		t.Fatalf("second pause of a paused scope: %+v made %v, %v", again, made, err)
	}
	if _, _, err := relay.Pause(ctx, pool, relay.PauseRequest{Scope: all, Actor: "ann", Reason: "r3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Resume(ctx, pool, relay.PauseRequest{Scope: all, Actor: "ann", Reason: "r4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Resume(ctx, pool, relay.PauseRequest{Scope: all, Actor: "ann", Reason: "r5"}); !errors.Is(err, relay.ErrNotPaused) {
		t.Fatalf("resume of a scope not paused: %v, want ErrNotPaused", err)
	}
	active, err := relay.ListPauses(ctx, pool, "", false, 0)
	if err != nil || len(active) != 1 || active[0].Scope != order {
		t.Fatalf("active pauses: %+v, %v", active, err)
	}
	history, err := relay.ListPauses(ctx, pool, "", true, 0)
	if err != nil || len(history) != 2 || history[0].Scope != all || history[0].ResumeReason != "r4" || history[1].ID != first.ID {
		t.Fatalf("pause history: %+v, %v", history, err)
	}
	for _, tc := range []struct {
		req  relay.PauseRequest
		want string
	}{
		{relay.PauseRequest{Scope: relay.PauseScope{Kind: "tenant"}, Actor: "a", Reason: "r"}, "Scope.Kind"},
		{relay.PauseRequest{Scope: relay.PauseScope{Kind: relay.PausePartition, Partition: -1}, Actor: "a", Reason: "r"}, "Scope.Partition"},
		{relay.PauseRequest{Scope: relay.PauseScope{Kind: relay.PausePartition, Partition: 16}, Actor: "a", Reason: "r"}, "no such relay partition: the schema's relays have 16 (0-15)"},
		{relay.PauseRequest{Scope: relay.PauseScope{Kind: relay.PauseAggregateType}, Actor: "a", Reason: "r"}, "Scope.AggregateType"},
		{relay.PauseRequest{Scope: all, Reason: "r"}, "Actor"},
		{relay.PauseRequest{Scope: all, Actor: "a"}, "Reason"},
		{relay.PauseRequest{Schema: "no such", Scope: all, Actor: "a", Reason: "r"}, "Schema"},
	} {
		if _, _, err := relay.Pause(ctx, pool, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Pause(%+v): %v, want an error naming %s", tc.req, err, tc.want)
		}
	}
}

// A resume wakes relays that listen: one that polls once an hour claims the held
// events at once. (Unordered: a woken worker claims straight away, so the wake-up before
// the resume is seen to be handled; an ordered one would probe first.)
func TestResumeWakesListeningRelays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	cfg := fastConfig()
	cfg.Mode, cfg.FallbackPollInterval, cfg.PollInterval = relay.Unordered, time.Hour, time.Hour
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	scope := relay.PauseScope{Kind: relay.PauseAll}
	if _, _, err := relay.Pause(ctx, pool, relay.PauseRequest{Scope: scope, Actor: "t", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the relay listening", func() bool { return r.Stats().WakeupListening })
	enqueueTyped(t, pool, "order", aggregates("o", 3), 2)
	n, err := outbox.NewNotifier(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	before := r.Stats().Claims
	n.AfterCommit(ctx) // the producer's wake-up: the relay claims, finds everything paused
	waitUntil(t, 10*time.Second, "the relay to claim on the wake-up", func() bool { return r.Stats().Claims > before })
	if got := len(sink.Messages()); got != 0 {
		t.Fatalf("%d messages published while paused", got)
	}
	if _, err := relay.Resume(ctx, pool, relay.PauseRequest{Scope: scope, Actor: "t", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, sink, 5*time.Second, "the held events after the resume", counted(6, func(outbox.Message) bool { return true }))
}

func enqueueTyped(t testing.TB, pool *pgxpool.Pool, typ string, aggs []string, per int) {
	t.Helper()
	ctx := context.Background()
	var events []outbox.Event
	for v := 1; v <= per; v++ {
		for _, a := range aggs {
			events = append(events, outbox.Event{
				AggregateType: typ, AggregateID: a, AggregateVersion: int64(v), EventType: typ + ".changed",
				Payload: fmt.Appendf(nil, `{"v":%d}`, v),
			})
		}
	}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
		t.Fatal(err)
	}
}

// An idle relay whose first due rows are all paused (more than its probe reads, 1,000)
// still finds an unpaused event behind them and publishes it, in both modes.
func TestPausedBacklogDoesNotHideTheRest(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.Pool(t)
			if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
				SELECT gen_random_uuid(), 'payment', 'p' || (g % 50), 'payment.captured', '{}' FROM generate_series(1, 3000) g`); err != nil {
				t.Fatal(err)
			}
			if _, _, err := relay.Pause(ctx, pool, relay.PauseRequest{Scope: relay.PauseScope{Kind: relay.PauseAggregateType, AggregateType: "payment"}, Actor: "t", Reason: "r"}); err != nil {
				t.Fatal(err)
			}
			sink := &memsink.Sink{}
			cfg := fastConfig()
			cfg.Mode, cfg.Wakeup = mode, relay.WakeupPoll // idle workers probe every poll
			start(t, newRelay(t, pool, sink, cfg))
			waitUntil(t, 10*time.Second, "the relay idle on the paused backlog", func() bool {
				return len(sink.Messages()) == 0 && queryInt(t, pool, `SELECT count(*) FROM outbox.relay_members`) == 1
			})
			time.Sleep(200 * time.Millisecond) // several polls, each probing: the workers are idle now
			enqueueTyped(t, pool, "order", aggregates("o", 1), 1)
			waitFor(t, sink, 10*time.Second, "the order behind 3,000 paused payments", counted(1, func(m outbox.Message) bool { return m.AggregateType == "order" }))
			if n := count(sink.Messages(), func(m outbox.Message) bool { return m.AggregateType == "payment" }); n != 0 {
				t.Fatalf("%d paused payments published", n)
			}
		})
	}
}
