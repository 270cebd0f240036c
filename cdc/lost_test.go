package cdc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Slot starvation (TESTPLAN #56): with max_slot_wal_keep_size small, a Source stopped
// while the cluster writes more WAL than that finds its slot lost. It fails loudly
// (ErrSlotLost, naming the slot and the way out) and does not create a new slot; the
// events written meanwhile are all published by the relay's polling claims from the
// table — nothing is lost.
func TestLostSlotFallsBackToPolling(t *testing.T) {
	t.Parallel()
	c, err := pgtest.StartCluster("max_slot_wal_keep_size = 16MB", "max_wal_size = 32MB", "min_wal_size = 32MB")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	pool := pgtest.PoolFor(t, c.ConnString("postgres"))
	ctx := t.Context()
	m, err := outboxmigrate.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{Mode: relay.Ordered, Wakeup: relay.WakeupPoll, PollInterval: 200 * time.Millisecond, Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "relay", r.Run)
	s := newSource(t, pool, r, "lost")
	stop := startSource(t, pool, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	write(t, pool, ids("a", 10), 1, 5) // written while no Source reads
	if _, err := pool.Exec(ctx, `CREATE TABLE churn (x text)`); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "the slot is lost", func() bool {
		// ~40 MB of WAL per round (full-page writes off: about the rows' size), then a
		// checkpoint, which removes the segments past max_slot_wal_keep_size
		if _, err := pool.Exec(ctx, `INSERT INTO churn SELECT repeat(md5(g::text), 16) FROM generate_series(1, 70000) g`); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `TRUNCATE churn; CHECKPOINT`); err != nil {
			t.Fatal(err)
		}
		return queryInt(t, pool, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'lost' AND wal_status = 'lost'`) == 1
	})

	s2 := newSource(t, pool, r, "lost")
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = s2.Run(runCtx)
	if !errors.Is(err, ErrSlotLost) {
		t.Fatalf("Run on a lost slot = %v, want ErrSlotLost", err)
	}
	t.Logf("Run: %v", err)
	if n := queryInt(t, pool, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'lost' AND wal_status = 'lost'`); n != 1 {
		t.Fatal("the lost slot was replaced")
	}
	msgs := waitDelivered(t, sink, 50, time.Minute)
	checkOrder(t, msgs)
}
