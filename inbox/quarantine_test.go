package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// A handler panic quarantines the event with the panic as its reason, rolls its work
// back, and acks: later events of other aggregates flow; a redelivery is a duplicate;
// Replay after the fix applies it once.
func TestHandlerPanicIsQuarantined(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	var logs bytes.Buffer
	c := newConsumer(t, &inbox.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	bad := msg("o-1", 0)
	panicky := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if err := effect(ctx, tx, m); err != nil {
			return err
		}
		if m.ID == bad.ID {
			panic("nil map in the pricing rule")
		}
		return nil
	}
	res, err := c.Process(ctx, pool, bad, panicky)
	if err != nil {
		t.Fatalf("Process: %v (a panic is quarantined, not returned)", err)
	}
	if res.Outcome != inbox.Quarantined || !strings.Contains(res.Reason, "nil map in the pricing rule") {
		t.Fatalf("result %+v, want quarantined with the panic's value", res)
	}
	if effectsOf(t, pool, bad.ID) != 0 {
		t.Fatal("the panicking handler's work was committed")
	}
	good := msg("o-2", 0)
	if res, err := c.Process(ctx, pool, good, panicky); err != nil || res.Outcome != inbox.Applied {
		t.Fatalf("another event after the panic: %+v, %v", res, err)
	}
	if res, err := c.Process(ctx, pool, bad, panicky); err != nil || res.Outcome != inbox.Duplicate {
		t.Fatalf("redelivery of the quarantined event: %+v, %v; want a duplicate", res, err)
	}
	list, err := c.Quarantined(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Message.ID != bad.ID || list[0].Kind != inbox.QuarantinePanic || list[0].Attempts != 1 ||
		string(list[0].Message.Payload) != string(bad.Payload) || list[0].Message.Headers["x-v"] != "0" {
		t.Fatalf("quarantine %+v", list)
	}
	if s := c.Stats(); s.Quarantined != 1 || s.Applied != 1 {
		t.Fatalf("stats %+v", s)
	}
	if !strings.Contains(logs.String(), "quarantined event") || !strings.Contains(logs.String(), "event_id="+bad.ID.String()) {
		t.Fatalf("no warning for the quarantined event in the log:\n%s", logs.String())
	}
	// Replayed with the handler still panicking: quarantined again, one more attempt.
	if res, err := c.Replay(ctx, pool, bad.ID, panicky); err != nil || res.Outcome != inbox.Quarantined {
		t.Fatalf("replay with the bug still in: %+v, %v", res, err)
	}
	list, _ = c.Quarantined(ctx, pool, nil)
	if len(list) != 1 || list[0].Attempts != 2 {
		t.Fatalf("after a failed replay: %+v", list)
	}
	// Fixed: the replay applies it, once.
	if res, err := c.Replay(ctx, pool, bad.ID, effect); err != nil || res.Outcome != inbox.Applied {
		t.Fatalf("replay after the fix: %+v, %v", res, err)
	}
	if effectsOf(t, pool, bad.ID) != 1 {
		t.Fatal("the replayed event's effect is not there once")
	}
	if _, err := c.Replay(ctx, pool, bad.ID, effect); !errors.Is(err, inbox.ErrNotQuarantined) {
		t.Fatalf("second replay: %v, want ErrNotQuarantined", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.inbox WHERE event_id = $1 AND outcome = 'applied'`, bad.ID); n != 1 {
		t.Fatal("the replayed event's dedup row is not settled applied")
	}
	if s := c.Stats(); s.Replayed != 1 {
		t.Fatalf("stats %+v, want 1 replayed", s)
	}
}

// A permanent handler error quarantines the event (kind permanent); the aggregate's
// version does not move past it, so under GapPark the next version parks until the
// quarantined one is replayed, which unparks it.
func TestPermanentErrorHoldsTheAggregateUntilReplayed(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, nil)
	v1, v2 := msg("o-1", 1), msg("o-1", 2)
	refuse := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if m.AggregateVersion == 1 {
			return outbox.Permanent(errors.New("customer account closed"))
		}
		return effect(ctx, tx, m)
	}
	res, err := c.Process(ctx, pool, v1, refuse)
	if err != nil || res.Outcome != inbox.Quarantined || !strings.Contains(res.Reason, "customer account closed") {
		t.Fatalf("%+v, %v", res, err)
	}
	if res, err := c.Process(ctx, pool, v2, refuse); err != nil || res.Outcome != inbox.Parked {
		t.Fatalf("the next version after a quarantined one: %+v, %v; want parked", res, err)
	}
	list, err := c.Quarantined(ctx, pool, nil)
	if err != nil || len(list) != 1 || list[0].Kind != inbox.QuarantinePermanent {
		t.Fatalf("%+v, %v", list, err)
	}
	res, err = c.Replay(ctx, pool, v1.ID, effect)
	if err != nil || res.Outcome != inbox.Applied || !slices.Equal(res.Unparked, []uuid.UUID{v2.ID}) {
		t.Fatalf("replay: %+v, %v; want applied, unparking v2", res, err)
	}
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("applied %v, want [1 2]", got)
	}
}

// A parked event whose handler fails for good while it is unparked is quarantined; the
// events before it stay applied, the version stops before it.
func TestUnparkedEventPanicking(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, nil)
	v1, v2, v3, v4 := msg("o-1", 1), msg("o-1", 2), msg("o-1", 3), msg("o-1", 4)
	wantOutcome(t, process(t, c, pool, v1), inbox.Applied)
	wantOutcome(t, process(t, c, pool, v3), inbox.Parked)
	wantOutcome(t, process(t, c, pool, v4), inbox.Parked)
	res, err := c.Process(ctx, pool, v2, func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if m.AggregateVersion == 3 {
			panic("v3 is poison")
		}
		return effect(ctx, tx, m)
	})
	if err != nil || res.Outcome != inbox.Applied || len(res.Unparked) != 0 || !strings.Contains(res.Reason, "v3 is poison") {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2}) || lastVersion(t, pool, "o-1") != 2 {
		t.Fatalf("applied %v (last %d), want [1 2] (last 2)", got, lastVersion(t, pool, "o-1"))
	}
	if count(t, pool, `SELECT count(*) FROM outbox.inbox_parked`) != 1 || count(t, pool, `SELECT count(*) FROM outbox.inbox_quarantine`) != 1 {
		t.Fatal("want v4 parked and v3 quarantined")
	}
	res, err = c.Replay(ctx, pool, v3.ID, effect)
	if err != nil || !slices.Equal(res.Unparked, []uuid.UUID{v4.ID}) {
		t.Fatalf("replay v3: %+v, %v", res, err)
	}
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("applied %v", got)
	}
}

// S6: an event of a schema version the consumer does not accept is quarantined without
// running the handler, with a reason naming the pair; the others flow.
func TestUnacceptedSchemaIsQuarantined(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, &inbox.Config{Accept: []inbox.Schema{{EventType: "order.changed", SchemaVersion: 1}}})
	v2schema := msg("o-1", 0)
	v2schema.SchemaVersion = 2
	called := false
	res, err := c.Process(ctx, pool, v2schema, func(context.Context, pgx.Tx, outbox.Message) error { called = true; return nil })
	if err != nil || res.Outcome != inbox.Quarantined || called {
		t.Fatalf("%+v, %v, handler called: %v", res, err, called)
	}
	if !strings.Contains(res.Reason, `"order.changed" at schema version 2`) {
		t.Fatalf("reason %q does not name the pair", res.Reason)
	}
	wantOutcome(t, process(t, c, pool, msg("o-2", 0)), inbox.Applied)
	list, err := c.Quarantined(ctx, pool, &inbox.ListOptions{Limit: 10})
	if err != nil || len(list) != 1 || list[0].Kind != inbox.QuarantineSchema || list[0].Message.SchemaVersion != 2 {
		t.Fatalf("%+v, %v", list, err)
	}
	// The consumer upgraded to accept version 2: the replay applies it.
	upgraded := newConsumer(t, &inbox.Config{Accept: []inbox.Schema{{EventType: "order.changed", SchemaVersion: 1}, {EventType: "order.changed", SchemaVersion: 2}}})
	if res, err := upgraded.Replay(ctx, pool, v2schema.ID, effect); err != nil || res.Outcome != inbox.Applied {
		t.Fatalf("replay after the upgrade: %+v, %v", res, err)
	}
}

// The quarantine list pages by its cursor.
func TestQuarantinePages(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, &inbox.Config{Accept: []inbox.Schema{{EventType: "other", SchemaVersion: 1}}})
	for range 5 {
		wantOutcome(t, process(t, c, pool, msg("o-1", 0)), inbox.Quarantined)
	}
	var all []inbox.QuarantinedEvent
	opts := &inbox.ListOptions{Limit: 2}
	for {
		page, err := c.Quarantined(ctx, pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		opts.After = &page[len(page)-1]
	}
	seen := map[uuid.UUID]bool{}
	for _, e := range all {
		seen[e.Message.ID] = true
	}
	if len(all) != 5 || len(seen) != 5 {
		t.Fatalf("paged %d events (%d distinct), want 5", len(all), len(seen))
	}
}
