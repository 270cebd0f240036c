package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	cases := map[string]*relay.Config{
		"BatchSize":        {BatchSize: 20000},
		"Mode":             {Mode: "sideways"},
		"Partitions":       {Partitions: 5000},
		"Schema":           {Schema: `x"; DROP TABLE y; --`},
		"RetryMaxDelay":    {RetryBaseDelay: time.Minute, RetryMaxDelay: time.Second},
		"Retention.Mode":   {Retention: relay.Retention{Mode: "forever"}},
		"MaxAttempts":      {MaxAttempts: -1},
		"Concurrency":      {Concurrency: 100},
		"Retention.Keep":   {Retention: relay.Retention{Keep: -time.Hour}},
		"BreakerMaxDelay":  {BreakerInitialDelay: time.Minute, BreakerMaxDelay: time.Second},
		"ShutdownTimeout":  {ShutdownTimeout: -1},
		"PollInterval":     {PollInterval: -1},
		"MaxPerAggregate":  {MaxPerAggregate: -1},
		"BatchTimeout":     {BatchTimeout: -1},
		"RetryBaseDelay":   {RetryBaseDelay: -1},
		"BreakerMinAggreg": {BreakerMinAggregates: -1},
		// a lane of the other types needs a worker of its own, and lanes need order
		"IsolatedTypes needs a Concurrency": {IsolatedTypes: []string{"bulk"}},
		"IsolatedTypes needs Mode":          {Mode: relay.Unordered, Concurrency: 2, IsolatedTypes: []string{"bulk"}},
		"IsolatedTypes must name distinct":  {Concurrency: 2, IsolatedTypes: []string{"bulk", "bulk"}},
		"TypeRates needs Mode":              {Mode: relay.Unordered, TypeRates: map[string]float64{"bulk": 10}},
		`TypeRates must map aggregate types to positive events a second, got "bulk": 0`: {TypeRates: map[string]float64{"bulk": 0}},
		`TypeRates must map aggregate types to positive events a second, got "": 1`:     {TypeRates: map[string]float64{"": 1}},
	}
	for field, cfg := range cases {
		_, err := relay.New(pool, &memsink.Sink{}, cfg)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want one naming the field", field, err)
		}
	}
	if _, err := relay.New(pool, nil, nil); err == nil {
		t.Error("nil sink accepted")
	}
	// More batches in flight than the pool has connections: they would wait for each other.
	tooMany := int(pool.Config().MaxConns) + 1
	if _, err := relay.New(pool, &memsink.Sink{}, &relay.Config{Concurrency: tooMany}); err == nil || !strings.Contains(err.Error(), "MaxConns") {
		t.Errorf("Concurrency %d on a pool of %d: err = %v, want one naming MaxConns", tooMany, pool.Config().MaxConns, err)
	}
}

// A relay whose mode or partition count differs from relay_config refuses to start.
func TestConfigMismatchRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	first := newRelay(t, pool, &memsink.Sink{}, fastConfig())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.relay_config WHERE mode = 'ordered' AND partitions = 16`)
	cfg := fastConfig()
	cfg.Mode = relay.Unordered
	err := newRelay(t, pool, &memsink.Sink{}, cfg).Run(context.Background())
	if !errors.Is(err, relay.ErrConfigMismatch) || !strings.Contains(err.Error(), "mode=unordered") {
		t.Fatalf("err = %v, want ErrConfigMismatch naming the modes", err)
	}
	cfg = fastConfig()
	cfg.Partitions = 8
	if err := newRelay(t, pool, &memsink.Sink{}, cfg).Run(context.Background()); !errors.Is(err, relay.ErrConfigMismatch) {
		t.Fatalf("partitions: err = %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRetentionModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.RetentionMode{relay.DeleteOnPublish, relay.KeepThenDelete, relay.KeepThenArchive} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("k", 10), 5)
			// One dead event: retention never removes it.
			_, err := pool.Exec(context.Background(), `UPDATE outbox.events SET dead_at = now(), last_error = 'x' WHERE aggregate_id = 'k9' AND aggregate_version = 1`)
			if err != nil {
				t.Fatal(err)
			}
			cfg := fastConfig()
			cfg.Retention = relay.Retention{Mode: mode, Keep: time.Millisecond, BatchSize: 7, Interval: time.Hour}
			sink := &memsink.Sink{}
			r := newRelay(t, pool, sink, cfg)
			start(t, r)
			waitFor(t, sink, 10*time.Second, "45 events", func(m []outbox.Message) bool { return len(m) == 45 })
			switch mode {
			case relay.DeleteOnPublish:
				waitSQL(t, pool, 10*time.Second, 5, `SELECT count(*) FROM outbox.events`)
			default:
				// Published, and longer ago than Keep (1 ms) by the database's clock, as Purge judges.
				waitSQL(t, pool, 10*time.Second, 45, `SELECT count(*) FROM outbox.events WHERE published_at < now() - interval '1 millisecond'`)
				n, err := r.Purge(context.Background())
				if err != nil || n != 45 {
					t.Fatalf("Purge = %d, %v; want 45", n, err)
				}
				want := 0
				if mode == relay.KeepThenArchive {
					want = 45
				}
				if got := queryInt(t, pool, `SELECT count(*) FROM outbox.events_archive`); got != want {
					t.Fatalf("%d archived rows, want %d", got, want)
				}
			}
			// Left: the dead event and the 4 it holds.
			if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'k9'`); n != 5 {
				t.Fatalf("%d rows of the dead event's aggregate left, want 5", n)
			}
		})
	}
}

// A purge racing replays of a dead event never removes it: purge deletes only rows
// published before the cutoff, checked in the DELETE itself.
func TestPurgeRacesReplay(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	enqueue(t, pool, aggregates("p", 50), 4)
	if _, err := pool.Exec(ctx, `UPDATE outbox.events SET created_at = now() - interval '2 hours', published_at = now() - interval '1 hour' WHERE aggregate_id <> 'p0'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox.events SET created_at = now() - interval '2 hours', dead_at = now() WHERE aggregate_id = 'p0'`); err != nil {
		t.Fatal(err)
	}
	var ids []string
	rows, _ := pool.Query(ctx, `SELECT id::text FROM outbox.events WHERE aggregate_id = 'p0'`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		ids = append(ids, s)
	}
	cfg := fastConfig()
	cfg.Retention = relay.Retention{Keep: time.Minute, BatchSize: 3}
	r := newRelay(t, pool, &memsink.Sink{}, cfg) // not started: Purge is called directly
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 20 {
			if _, err := relay.Replay(ctx, pool, relay.Action{IDs: parseIDs(t, ids...), Actor: "a", Reason: "r"}); err != nil {
				t.Error(err)
			}
			if _, err := pool.Exec(ctx, `UPDATE outbox.events SET dead_at = now() WHERE aggregate_id = 'p0' AND dead_at IS NULL`); err != nil {
				t.Error(err)
			}
		}
	})
	var purged int64
	wg.Go(func() {
		for range 5 {
			n, err := r.Purge(ctx)
			if err != nil {
				t.Error(err)
			}
			purged += n
		}
	})
	wg.Wait()
	if purged != 196 {
		t.Fatalf("purged %d, want the 196 published events", purged)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'p0'`); n != 4 {
		t.Fatalf("%d of the replayed events left, want 4", n)
	}

	// A published row made pending again (as a replay of a published event would) after
	// the purge's snapshot saw it old and published, while the purge waits for its row
	// lock: the purge re-checks the state it expects on the locked row and leaves it.
	enqueue(t, pool, aggregates("q", 3), 1)
	if _, err := pool.Exec(ctx, `UPDATE outbox.events SET published_at = now() - interval '1 hour', created_at = now() - interval '2 hours' WHERE aggregate_id LIKE 'q%'`); err != nil {
		t.Fatal(err)
	}
	var victim int64
	if err := pool.QueryRow(ctx, `SELECT min(seq) FROM outbox.events WHERE aggregate_id LIKE 'q%'`).Scan(&victim); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM outbox.events WHERE seq = $1 FOR UPDATE`, victim); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.Purge(ctx); done <- err }()
	// pg_stat_activity keeps the first 1 kB of the statement: its header comment
	waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '-- purge:%'`)
	if _, err := holder.Exec(ctx, `UPDATE outbox.events SET published_at = NULL, available_at = now() WHERE seq = $1`, victim); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE seq = $1 AND published_at IS NULL`, victim); n != 1 {
		t.Fatalf("the purge deleted event seq %d, made pending while the purge waited for it", victim)
	}
}

// Stopping under load. With time to finish, the batch in flight completes
// and is marked; with less time than the publish needs, it is abandoned and its events
// are immediately claimable again (no lock left behind). Run returns within the deadline.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	for _, finish := range []bool{true, false} {
		t.Run(map[bool]string{true: "finishes", false: "abandons"}[finish], func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("g", 50), 10) // 500 events
			publishing := make(chan struct{}, 1)
			sink := &memsink.Sink{}
			slow := &slowSink{inner: sink, delay: 400 * time.Millisecond, started: publishing}
			cfg := fastConfig()
			cfg.BatchSize = 50
			cfg.ShutdownTimeout = 2 * time.Second
			if !finish {
				cfg.ShutdownTimeout = 100 * time.Millisecond
			}
			r := newRelay(t, pool, slow, cfg)
			stop := start(t, r)
			<-publishing
			began := time.Now()
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(began); took > cfg.ShutdownTimeout+time.Second {
				t.Fatalf("Run took %s to return, deadline %s", took, cfg.ShutdownTimeout)
			}
			published := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
			if finish && published == 0 {
				t.Fatal("the batch in flight was not finished and marked")
			}
			if !finish && published != 0 {
				t.Fatalf("%d events marked although the batch was abandoned", published)
			}
			// No row stays locked: a claim right now sees every pending row.
			pending := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
			locked := queryInt(t, pool, `SELECT count(*) FROM (SELECT 1 FROM outbox.events WHERE published_at IS NULL FOR UPDATE SKIP LOCKED) s`)
			if locked != pending {
				t.Fatalf("%d of %d pending rows still locked after shutdown", pending-locked, pending)
			}
		})
	}
}

// A pool closed under a running relay ends Run with an error: no batch can run again, so
// retrying (a warning every poll, forever) would only hide it. Both modes, busy or idle.
func TestRunEndsWhenItsPoolIsClosed(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("c", 5), 2)
			sink := &memsink.Sink{}
			cfg := fastConfig()
			cfg.Mode = mode
			r := newRelay(t, pool, sink, cfg)
			done := make(chan error, 1)
			go func() { done <- r.Run(context.Background()) }()
			waitFor(t, sink, 10*time.Second, "the backlog", distinct(10))
			pool.Close()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "pool was closed") {
					t.Fatalf("Run = %v; want the closed pool's error", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run still running 10s after its pool was closed")
			}
		})
	}
}
