package cdc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// emitter returns a Writer whose Emit is read from slot.
func emitter(t *testing.T, slot string) *outbox.Writer {
	t.Helper()
	w, err := outbox.NewWriter(&outbox.WriterConfig{Slot: slot})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// emit writes perAggregate events for each aggregate of ids into the WAL only
// (Writer.Emit, read from slot), in one transaction, with versions from first.
func emit(t *testing.T, pool *pgxpool.Pool, slot string, ids []string, first, perAggregate int) {
	t.Helper()
	var events []outbox.Event
	for v := first; v < first+perAggregate; v++ {
		for _, id := range ids {
			events = append(events, outbox.Event{
				AggregateType: "order", AggregateID: id, AggregateVersion: int64(v), EventType: "order.changed",
				Payload: fmt.Appendf(nil, `{"v": %d}`, v),
			})
		}
	}
	ctx := context.Background()
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return emitter(t, slot).Emit(ctx, outbox.PgxTx(tx), events...)
	}); err != nil {
		t.Fatal(err)
	}
}

var errRollBack = errors.New("roll back")

// In table-less mode (outbox.Emit), in each mode, what concurrent transactions commit is
// published from the WAL alone — every event, each aggregate in order, every field as
// written (the payload byte for byte), created at its commit — with no row ever written;
// a rolled-back transaction's events never go out; the slot confirms past them.
func TestEmittedEventsArePublishedWithoutRows(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			sink, s := startCDC(t, pool, mode)
			ctx := t.Context()

			rolledBack := outbox.Event{AggregateType: "order", AggregateID: "gone", EventType: "order.changed"}
			err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
				if err := emitter(t, s.cfg.Slot).Emit(ctx, outbox.PgxTx(tx), rolledBack); err != nil {
					return err
				}
				return errRollBack
			})
			if !errors.Is(err, errRollBack) {
				t.Fatalf("rolled-back transaction: %v", err)
			}
			full := outbox.Event{
				AggregateType: "doc", AggregateID: "full", AggregateVersion: 7, EventType: "doc.saved", SchemaVersion: 3,
				Topic: "docs.saved", Headers: map[string]string{"tenant": "t1", "x": "ü"},
				ContentType: "application/octet-stream", Payload: []byte{0, 1, 2, 0xff},
				TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			}
			var commitBefore time.Time
			if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&commitBefore); err != nil {
				t.Fatal(err)
			}
			if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
				return emitter(t, s.cfg.Slot).Emit(ctx, outbox.PgxTx(tx), full)
			}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					for v := 1; v <= 10; v++ {
						emit(t, pool, s.cfg.Slot, ids(string(rune('a'+w)), 10), v, 1)
					}
				})
			}
			wg.Wait()
			msgs := waitDelivered(t, sink, 401, 30*time.Second)
			var orders []outbox.Message
			for _, m := range msgs {
				switch m.AggregateID {
				case "gone":
					t.Fatal("an event of a rolled-back transaction was published")
				case "full":
					if m.AggregateType != full.AggregateType || m.AggregateVersion != 7 || m.EventType != full.EventType ||
						m.SchemaVersion != 3 || m.Topic != full.Topic || m.Headers["tenant"] != "t1" || m.Headers["x"] != "ü" ||
						m.ContentType != full.ContentType || !bytes.Equal(m.Payload, full.Payload) || m.TraceParent != full.TraceParent ||
						m.Attempt != 1 || m.Seq != 0 || m.CreatedAt.Before(commitBefore.Add(-time.Second)) || time.Since(m.CreatedAt) > time.Minute {
						t.Fatalf("published %+v, want the fields of %+v, created at its commit", m, full)
					}
				default:
					if want := fmt.Sprintf(`{"v": %d}`, m.AggregateVersion); string(m.Payload) != want {
						t.Fatalf("payload %q, want %q byte for byte", m.Payload, want)
					}
					orders = append(orders, m)
				}
			}
			if mode == relay.Ordered {
				checkOrder(t, orders)
			}
			if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events`); n != 0 {
				t.Fatalf("%d rows in the events table, want none (table-less)", n)
			}
			waitUntil(t, 10*time.Second, "401 emitted events read and published", func() bool {
				st := s.Stats()
				return st.Emitted == 401 && st.Published == 401 && st.Written == 0
			})
			waitConfirmedPastNow(t, pool, s.cfg.Slot)
		})
	}
}

// What cannot be published from the WAL becomes a row, and the table's guarantees take
// over (ordered mode): a failed publish is written pending with its attempt counted, a
// refused one dead (holding its aggregate), each with every later event of its aggregate
// behind it — in the same transaction, and in later ones (the table has an earlier
// event of the aggregate); a scheduled event waits in the table. Other aggregates go
// out from the WAL with no row. The failed aggregate is then published by the relay's
// retries in order; the dead one holds until replayed.
func TestEmittedFailuresBecomeRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var holdFlaky atomic.Bool // flaky's first event fails while set
	holdFlaky.Store(true)
	sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		switch {
		case m.AggregateID == "refused":
			return outbox.Permanent(errors.New("schema rejected"))
		case m.AggregateID == "flaky" && m.AggregateVersion == 1 && holdFlaky.Load():
			return errors.New("try again")
		}
		return nil
	}}
	r := runRelay(t, pool, sink, &relay.Config{
		Mode: relay.Ordered, Wakeup: relay.WakeupPoll, PollInterval: time.Hour, LeaseTTL: 30 * time.Second,
		SlowPublish: time.Minute, RetryBaseDelay: 200 * time.Millisecond, ShutdownTimeout: 5 * time.Second, Logger: testLogger,
	})
	s := newSource(t, pool, r, slotName(t, pool))
	startSource(t, pool, s)
	ctx := t.Context()

	emit(t, pool, s.cfg.Slot, []string{"flaky", "refused", "fine"}, 1, 2)
	waitUntil(t, 20*time.Second, "the first transaction settled", func() bool { return s.Stats().Published+s.Stats().Written == 6 })
	emit(t, pool, s.cfg.Slot, []string{"flaky", "refused", "fine"}, 3, 1)
	later := outbox.Event{AggregateType: "order", AggregateID: "later", EventType: "order.changed", AvailableAt: time.Now().Add(time.Hour)}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return emitter(t, s.cfg.Slot).Emit(ctx, outbox.PgxTx(tx), later) }); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "every transaction settled", func() bool { return s.Stats().Published+s.Stats().Written == 10 })
	holdFlaky.Store(false)
	msgs := waitDelivered(t, sink, 6, 30*time.Second) // fine ×3, flaky ×3
	checkOrder(t, msgs)
	waitUntil(t, 10*time.Second, "the retried batch committed", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`) == 3
	})
	type row struct {
		aggregate        string
		version          int64
		attempts         int
		dead, published  bool
		lastErrorMatches bool
	}
	got := map[string]row{}
	rows, err := pool.Query(ctx, `SELECT aggregate_id, coalesce(aggregate_version, 0), attempts, dead_at IS NOT NULL,
		published_at IS NOT NULL, coalesce(last_error, '') FROM outbox.events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for rows.Next() {
		var r row
		var lastError string
		if err := rows.Scan(&r.aggregate, &r.version, &r.attempts, &r.dead, &r.published, &lastError); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s/%d", r.aggregate, r.version)
		r.lastErrorMatches = lastError != ""
		got[key] = r
		order = append(order, key)
	}
	rows.Close()
	want := map[string]row{
		"flaky/1":   {published: true, lastErrorMatches: true}, // written after its failed attempt, published by a retry
		"flaky/2":   {attempts: 1, published: true},            // behind it in the same transaction
		"flaky/3":   {attempts: 1, published: true},            // behind it from a later transaction
		"refused/1": {attempts: 1, dead: true, lastErrorMatches: true},
		"refused/2": {}, "refused/3": {}, // held by the dead event
		"later/0": {}, // scheduled
	}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want exactly %d (no row for aggregate fine)", order, len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		w.aggregate, w.version = g.aggregate, g.version
		if k == "flaky/1" && g.attempts >= 2 {
			w.attempts = g.attempts // the failed attempt counted, and the one that published it
		}
		if !ok || g != w {
			t.Errorf("row %s = %+v (present %v), want %+v", k, g, ok, w)
		}
	}
	if want := []string{"flaky/1", "refused/1", "flaky/2", "refused/2", "flaky/3", "refused/3", "later/0"}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("rows in seq order %v, want %v (commit order)", order, want)
	}
	if st := s.Stats(); st.Written != 7 || st.Published != 3 {
		t.Errorf("Stats = %+v, want 7 written, 3 published from the WAL", st)
	}
}

// The ack discipline in table-less mode, where the WAL is the only copy: a Source whose
// sink never acknowledged emitted events stops (as a crash would); the slot has not
// confirmed them, so the next Source reads and publishes them. The negative control
// confirms on receipt: the events are lost — nothing in the table, nothing read again.
func TestUnsettledEmittedEventsAreReadAgain(t *testing.T) {
	t.Parallel()
	for _, early := range []bool{false, true} {
		name := "confirm after settle"
		if early {
			name = "negative control: confirm on receipt"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			slot := slotName(t, pool)
			hang := &hangingSink{calls: make(chan struct{}, 1)}
			r1, err := relay.New(pool, hang, &relay.Config{Mode: relay.Unordered, Wakeup: relay.WakeupPoll, PollInterval: time.Hour, BatchTimeout: time.Hour, ShutdownTimeout: time.Second, Logger: testLogger})
			if err != nil {
				t.Fatal(err)
			}
			stopRelay := run(t, "relay 1", r1.Run)
			s1 := newSource(t, pool, r1, slot)
			s1.confirmOnReceipt = early
			stopSource := startSource(t, pool, s1)
			emit(t, pool, slot, ids("o", 10), 1, 1)
			select {
			case <-hang.calls:
			case <-time.After(30 * time.Second):
				t.Fatal("the sink was never called")
			}
			time.Sleep(500 * time.Millisecond) // several status intervals: whatever is confirmed, is sent
			if err := stopSource(); err != nil {
				t.Fatal(err)
			}
			_ = stopRelay()

			sink := &memsink.Sink{}
			r2 := newRelay(t, pool, sink, relay.Unordered)
			s2 := newSource(t, pool, r2, slot)
			run(t, "source 2", s2.Run)
			if early {
				time.Sleep(3 * time.Second)
				if n, st := sink.Count(), s2.Stats(); n != 0 || st.Events != 0 {
					t.Fatalf("the negative control delivered %d and read %d events again, want none: they were confirmed before the ack", n, st.Events)
				}
				if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events`); n != 0 {
					t.Fatalf("%d rows: the negative control must show the loss, not a table copy", n)
				}
				return
			}
			waitDelivered(t, sink, 10, 30*time.Second)
			if st := s2.Stats(); st.Emitted != 10 {
				t.Fatalf("Stats = %+v, want the 10 emitted events read again", st)
			}
		})
	}
}

// The prefix filter (TESTPLAN #64): a message of another prefix, and a non-transactional
// message of the schema's, are another tool's and are ignored; a transactional message of
// the schema's prefix whose content is not the Writer's is refused — logged, counted,
// never published — and neither stops the Source: the Writer's events around them go out.
func TestEmittedMessagesOfOtherToolsAreNotEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink, s := startCDC(t, pool, relay.Ordered)
	ctx := t.Context()
	emit(t, pool, s.cfg.Slot, []string{"before"}, 1, 1)
	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			`SELECT pg_logical_emit_message(true, 'other:outbox', '[{"id":"01a2399b-f407-7431-9d42-90e80d84c886","aggregate_type":"a","aggregate_id":"b","event_type":"c","schema_version":1}]')`,
			`SELECT pg_logical_emit_message(false, 'outbox:outbox', '[{"id":"01a2399b-f407-7431-9d42-90e80d84c887","aggregate_type":"a","aggregate_id":"nontx","event_type":"c","schema_version":1}]')`,
			`SELECT pg_logical_emit_message(true, 'outbox:outbox', 'not the Writer''s')`,
			`SELECT pg_logical_emit_message(true, 'outbox:outbox', '[{"id":"01a2399b-f407-7431-9d42-90e80d84c886","aggregate_type":"","aggregate_id":"b","event_type":"c","schema_version":1}]')`,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return emitter(t, s.cfg.Slot).Emit(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "order", AggregateID: "with", EventType: "order.changed"})
	})
	if err != nil {
		t.Fatal(err)
	}
	emit(t, pool, s.cfg.Slot, []string{"after"}, 1, 1)
	msgs := waitDelivered(t, sink, 3, 30*time.Second)
	for _, m := range msgs {
		if m.AggregateID != "before" && m.AggregateID != "with" && m.AggregateID != "after" {
			t.Fatalf("published %+v: not an event of the Writer", m)
		}
	}
	waitUntil(t, 10*time.Second, "the two messages not the Writer's refused", func() bool { return s.Stats().Refused == 2 })
	time.Sleep(300 * time.Millisecond)
	if st := s.Stats(); st.Emitted != 3 || st.Refused != 2 || sink.Count() != 3 {
		t.Fatalf("Stats = %+v, %d delivered: want 3 emitted events read and published, 2 messages refused", st, sink.Count())
	}
}

// Large table-less transactions are streamed before their commit too (logical_decoding_work_mem
// at 64 kB): the events of a subtransaction rolled back inside one that commits, and of a
// transaction that aborts, are never published; the rest is, in full, in order, with no
// row; and their created_at is the commit's.
func TestStreamedEmittedTransactions(t *testing.T) {
	t.Parallel()
	pool, sink, s := startStreamingSource(t)
	ctx := t.Context()
	w := emitter(t, s.cfg.Slot)
	events := func(prefix string, n, version int) []outbox.Event {
		out := make([]outbox.Event, n)
		for i := range out {
			out[i] = outbox.Event{
				AggregateType: "order", AggregateID: fmt.Sprintf("%s%d", prefix, i), EventType: "order.changed",
				AggregateVersion: int64(version), Payload: []byte(`{"n":1}`),
			}
		}
		return out
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 { // 3,000 events in 10 messages, rolled back
		if err := w.Emit(ctx, outbox.PgxTx(tx), events("aborted", 300, 1)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		for v := 1; v <= 10; v++ { // 5,000 events in 10 messages, each aggregate in version order
			if err := w.Emit(ctx, outbox.PgxTx(tx), events("big", 500, v)...); err != nil {
				return err
			}
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := w.Emit(ctx, outbox.PgxTx(sp), events("savepoint", 500, 1)...); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := waitDelivered(t, sink, 5000, 2*time.Minute)
	checkOrder(t, msgs)
	for _, m := range msgs {
		if !strings.HasPrefix(m.AggregateID, "big") {
			t.Fatalf("published %s: an event of a rolled-back (sub)transaction", m.AggregateID)
		}
		if m.CreatedAt.IsZero() || time.Since(m.CreatedAt) > time.Minute {
			t.Fatalf("created_at %v, want the commit's", m.CreatedAt)
		}
	}
	checkStreamed(t, pool, s.cfg.Slot)
	waitUntil(t, 10*time.Second, "5,000 emitted events read and published", func() bool {
		st := s.Stats()
		return st.Emitted == 5000 && st.Published == 5000
	})
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events`); n != 0 {
		t.Fatalf("%d rows, want none", n)
	}
}

// A slow publish in table-less mode delays its own aggregate only: the Source does not
// wait for a Publish call that outlives SlowPublish — its events are written as held rows
// and the group is confirmed — so other aggregates' later transactions go out at once; when
// the call returns its event is settled as published (once), and the aggregate's later
// events, written behind it, follow in order.
func TestSlowEmittedPublishHoldsOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	release := make(chan struct{})
	var slowCalls atomic.Int32
	sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		if m.AggregateID == "slow" && m.AggregateVersion == 1 && slowCalls.Add(1) == 1 {
			<-release // its first publish hangs until the test lets it go
		}
		return nil
	}}
	r := runRelay(t, pool, sink, &relay.Config{
		Mode: relay.Ordered, Wakeup: relay.WakeupPoll, PollInterval: time.Hour, LeaseTTL: 30 * time.Second,
		SlowPublish: 50 * time.Millisecond, ShutdownTimeout: 5 * time.Second, Logger: testLogger,
	})
	s := newSource(t, pool, r, slotName(t, pool))
	startSource(t, pool, s)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	emit(t, pool, s.cfg.Slot, []string{"slow", "fast"}, 1, 1)
	for v := 2; v <= 5; v++ {
		emit(t, pool, s.cfg.Slot, []string{"slow", "fast"}, v, 1)
	}
	waitUntil(t, 20*time.Second, "the fast aggregate's five events, while the slow one's publish hangs", func() bool {
		n := 0
		for _, m := range sink.Messages() {
			if m.AggregateID == "fast" {
				n++
			}
		}
		return n == 5
	})
	for _, m := range sink.Messages() {
		if m.AggregateID == "slow" {
			t.Fatalf("slow/%d published while its aggregate's first publish hangs", m.AggregateVersion)
		}
	}
	// the rows are written once the publish of the group they came in has been classified
	waitUntil(t, 10*time.Second, "5 pending rows of the slow aggregate (the held one and the four behind it)", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'slow' AND published_at IS NULL`) == 5
	})
	close(release)
	msgs := waitDelivered(t, sink, 10, 30*time.Second)
	checkOrder(t, msgs)
	waitUntil(t, 10*time.Second, "the slow aggregate's rows published", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`) == 5
	})
	if n := sink.Count(); n != 10 {
		for _, m := range sink.Messages() {
			t.Logf("delivered %s/%d", m.AggregateID, m.AggregateVersion)
		}
		t.Fatalf("%d deliveries, want 10: the held event went out twice", n)
	}
}

// A sink outage in table-less mode: what the Source reads while the sink is down goes to
// the table as pending rows with no attempt counted (an outage is not the events' fault),
// the slot is confirmed past it, and once the sink is back the relay's polling publishes
// every one, each aggregate in order.
func TestSinkOutageWithEmittedEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r := runRelay(t, pool, sink, &relay.Config{
		Wakeup: relay.WakeupPoll, PollInterval: time.Hour, LeaseTTL: 30 * time.Second, SlowPublish: time.Minute,
		BreakerInitialDelay: 100 * time.Millisecond, BreakerMaxDelay: 400 * time.Millisecond, Logger: testLogger,
	})
	s := newSource(t, pool, r, slotName(t, pool))
	startSource(t, pool, s)
	emit(t, pool, s.cfg.Slot, ids("before", 10), 1, 1)
	waitDelivered(t, sink, 10, 30*time.Second)
	sink.SetDown(true)
	for v := 2; v <= 4; v++ {
		emit(t, pool, s.cfg.Slot, ids("before", 10), v, 1)
	}
	waitUntil(t, 20*time.Second, "the 30 events read during the outage written to the table", func() bool { return s.Stats().Written == 30 })
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL AND attempts = 0`); n != 30 {
		t.Fatalf("%d pending rows with no attempt counted, want 30", n)
	}
	waitConfirmedPastNow(t, pool, s.cfg.Slot)
	sink.SetDown(false)
	checkOrder(t, waitDelivered(t, sink, 40, 30*time.Second))
}
