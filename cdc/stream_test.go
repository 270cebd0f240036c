package cdc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Large transactions are streamed before their commit (streaming 'on', with
// logical_decoding_work_mem at its 64 kB minimum): nothing of one that aborts is handed
// to the relay, nor of a subtransaction rolled back inside one that commits, and a
// 50,000-event transaction is published in full, in order (TESTPLAN #60). Without the
// stream abort handling the aborted inserts are counted as read (Stats.Events).
func TestStreamedTransactions(t *testing.T) {
	t.Parallel()
	pool, sink, s := startStreamingSource(t)
	ctx := t.Context()

	events := func(prefix string, n int) []outbox.Event {
		out := make([]outbox.Event, n)
		for i := range out {
			out[i] = outbox.Event{
				AggregateType: "order", AggregateID: fmt.Sprintf("%s%d", prefix, i%1000), EventType: "order.changed",
				AggregateVersion: int64(i/1000 + 1), Payload: []byte(`{"n":1}`),
			}
		}
		return out
	}
	// aborted: 3,000 events, rolled back
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), events("aborted", 3000)...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// committed: 50,000 events, and 2,000 more in a savepoint rolled back
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), events("big", 50_000)...); err != nil {
			return err
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := outbox.Enqueue(ctx, outbox.PgxTx(sp), events("savepoint", 2000)...); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := waitDelivered(t, sink, 50_000, 2*time.Minute)
	checkOrder(t, msgs)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stats: %+v", s.Stats())
		}
	})
	waitUntil(t, 10*time.Second, "50,000 events read and published", func() bool {
		st := s.Stats()
		return st.Events == 50_000 && st.Published == 50_000
	})
	checkStreamed(t, pool, s.cfg.Slot)
	if st := s.Stats(); st.Transactions != 1 {
		t.Fatalf("Stats = %+v, want 1 transaction read (the aborted one dropped)", st)
	}
}

// A payload TOASTed out of line (over 8 kB, incompressible) arrives whole: the WAL
// names the row, the claim reads it from the table (TESTPLAN #63).
func TestToastedPayloadArrivesWhole(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, relay.Ordered)
	s := newSource(t, pool, r, slotName(t, pool))
	startSource(t, pool, s)
	buf := make([]byte, 20_000)
	_, _ = rand.Read(buf)
	payload := []byte(`{"blob":"` + hex.EncodeToString(buf) + `"}`)
	ctx := t.Context()
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "doc", AggregateID: "1", EventType: "doc.saved", Payload: payload})
	}); err != nil {
		t.Fatal(err)
	}
	msgs := waitDelivered(t, sink, 1, 30*time.Second)
	if string(msgs[0].Payload) != string(payload) {
		t.Fatalf("payload of %d bytes delivered, want the %d written", len(msgs[0].Payload), len(payload))
	}
	waitUntil(t, 10*time.Second, "it is published by change data capture", func() bool { return s.Stats().Published == 1 })
}

// Transactions come in commit order: T1 begins and writes, T2 writes and commits, T1
// commits; T2's event is published first (TESTPLAN #59).
func TestInterleavedTransactionsInCommitOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, relay.Ordered)
	s := newSource(t, pool, r, slotName(t, pool))
	startSource(t, pool, s)
	ctx := t.Context()
	t1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = t1.Rollback(context.Background()) }()
	if err := outbox.Enqueue(ctx, outbox.PgxTx(t1), outbox.Event{AggregateType: "order", AggregateID: "t1", EventType: "e"}); err != nil {
		t.Fatal(err)
	}
	write(t, pool, []string{"t2"}, 1, 1)
	waitDelivered(t, sink, 1, 30*time.Second)
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := waitDelivered(t, sink, 2, 30*time.Second)
	if msgs[0].AggregateID != "t2" || msgs[1].AggregateID != "t1" {
		t.Fatalf("delivered %s then %s, want t2 (committed first) then t1", msgs[0].AggregateID, msgs[1].AggregateID)
	}
	if msgs[1].Seq > msgs[0].Seq {
		t.Fatalf("t1's seq %d is not below t2's %d: the test did not interleave", msgs[1].Seq, msgs[0].Seq)
	}
}

// The visibility wait's query widens the WAL's 32-bit xids right, and says false for a
// transaction still running, true once it committed.
func TestVisibleQuery(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	r, err := relay.New(pool, &memsink.Sink{}, &relay.Config{Logger: testLogger}) // not run: only its Source's query is
	if err != nil {
		t.Fatal(err)
	}
	s := newSource(t, pool, r, "unused")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var xid int64
	if err := tx.QueryRow(ctx, "SELECT (pg_current_xact_id()::text::bigint & 4294967295)").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	visible := func() bool {
		var v bool
		if err := pool.QueryRow(ctx, s.visibleQuery.SQL, s.visibleQuery.Args(&visibleParams{XIDs: []int64{xid}})...).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if visible() {
		t.Fatal("a running transaction is visible")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !visible() {
		t.Fatal("a committed transaction is not visible")
	}
}
