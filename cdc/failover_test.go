package cdc

import (
	"bytes"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// syncBuffer is a log destination tests read while the logger writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A primary failover (TESTPLAN #61, PostgreSQL 15: no slot sync). A streaming replica is
// promoted after the primary crashed with events its slot had not confirmed. The slot is
// missing on the new primary: the Source says so loudly (an error naming the failover,
// not a first start's warning) and creates a new one; every event of the table —
// confirmed or not — is published, in order, by the relay's polling claims, which the
// new session wakes (the backfill path). Table-less writes are refused on the new primary
// until the Source has created its slot there.
func TestPrimaryFailoverBackfillsFromTheTable(t *testing.T) {
	t.Parallel()
	primary, err := pgtest.StartCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Destroy() })
	ctx := t.Context()
	pool1 := pgtest.PoolFor(t, primary.ConnString("postgres"))
	m, err := outboxmigrate.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, pool1); err != nil {
		t.Fatal(err)
	}
	replica, err := primary.StartReplica()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Destroy() })

	sink := &memsink.Sink{}
	r1, err := relay.New(pool1, sink, &relay.Config{Mode: relay.Ordered, Wakeup: relay.WakeupPoll, PollInterval: time.Hour, LeaseTTL: 30 * time.Second, Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	stopRelay1 := run(t, "relay 1", r1.Run)
	s1 := newSource(t, pool1, r1, "failover")
	stopSource1 := run(t, "source 1", s1.Run)
	waitUntil(t, 20*time.Second, "the source streams", func() bool { return s1.Stats().Streaming })
	write(t, pool1, ids("a", 10), 1, 2)
	waitDelivered(t, sink, 20, 30*time.Second)
	if err := stopSource1(); err != nil { // the Source is gone: what comes next is not confirmed
		t.Fatal(err)
	}
	write(t, pool1, ids("a", 10), 3, 2)
	_ = stopRelay1() // its leases released, so the new primary's relay need not wait out their TTL
	var end string
	if err := pool1.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	pool2 := pgtest.PoolFor(t, replica.ConnString("postgres"))
	waitUntil(t, 30*time.Second, "the replica replays the primary's last events", func() bool {
		return queryInt(t, pool2, `SELECT count(*) WHERE pg_last_wal_replay_lsn() >= $1::pg_lsn`, end) == 1
	})
	if err := primary.Stop("immediate"); err != nil { // the crash
		t.Fatal(err)
	}
	if err := replica.Promote(); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, pool2, `SELECT count(*) FROM pg_replication_slots`); n != 0 {
		t.Fatalf("%d slots on the promoted replica, want none (PostgreSQL 15 has no slot sync)", n)
	}
	err = outbox.WithTx(ctx, pool2, func(tx pgx.Tx) error {
		return emitter(t, "failover").Emit(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "order", AggregateID: "x", EventType: "e"})
	})
	if !errors.Is(err, outbox.ErrNoSlot) {
		t.Fatalf("Emit on the new primary before its slot exists = %v, want ErrNoSlot", err)
	}

	logs := &syncBuffer{}
	r2, err := relay.New(pool2, sink, &relay.Config{Mode: relay.Ordered, Wakeup: relay.WakeupPoll, PollInterval: time.Hour, LeaseTTL: 30 * time.Second, Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "relay 2", r2.Run)
	s2, err := New(pool2, r2, &Config{
		Slot: "failover", StatusInterval: 100 * time.Millisecond, RetryDelay: 100 * time.Millisecond,
		MaxRetryDelay: time.Second, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	dropSlotAtEnd(t, pool2, "failover")
	run(t, "source 2", s2.Run)
	msgs := waitDelivered(t, sink, 40, 30*time.Second)
	checkOrder(t, msgs)
	waitUntil(t, 10*time.Second, "the new session's error", func() bool {
		return bytes.Contains([]byte(logs.String()), []byte("level=ERROR msg=\"replication slot missing on a database with events"))
	})
	if !s2.Stats().SlotCreated {
		t.Fatal("the Source did not create the new primary's slot")
	}
	write(t, pool2, ids("a", 10), 5, 1) // and change data capture goes on there
	checkOrder(t, waitDelivered(t, sink, 50, 30*time.Second))
}
