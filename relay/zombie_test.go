package relay_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
)

// Relay A is paused (SIGSTOP) in the middle of a publish, past its lease;
// relay B takes A's partitions over and publishes; then A resumes (SIGCONT). A's late
// marks are fenced (counted, and they do not overwrite B's state), no first delivery is
// out of order, and A's stale re-sends are counted duplicates.
func TestZombieRelayIsFenced(t *testing.T) {
	t.Parallel()
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	if _, err := pool.Exec(context.Background(), deliveriesTable); err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, aggregates("z", 100), 30)
	// The batches wait for their calls (SlowPublish past the test): A, paused in a call,
	// sends its batch when it resumes and only then finds its lease gone, so each event
	// of its fenced marks was sent twice. (A batch that goes on without its calls may be
	// fenced before they send — ADR 0033 — and leave no duplicate to count.)
	cfg := childConfig{Mode: relay.Ordered, LeaseTTL: time.Second, BatchSize: 50, MaxPerAggregate: 4, PublishDelay: 300 * time.Millisecond, Announce: true, SlowPublish: time.Minute}
	a := startChild(t, connString, cfg)
	waitSQL(t, pool, 10*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, a.owner)
	b := startChild(t, connString, cfg)

	// Pause A while it publishes, for three lease lifetimes.
	for len(a.publishing) > 0 {
		<-a.publishing
	}
	<-a.publishing
	a.signal(syscall.SIGSTOP)
	paused := time.Now()
	waitSQL(t, pool, 10*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, b.owner)
	if d := time.Since(paused); d > cfg.LeaseTTL+2*time.Second {
		t.Fatalf("B took over %s after A was paused; lease TTL %s", d, cfg.LeaseTTL)
	}
	time.Sleep(2 * cfg.LeaseTTL) //nolint:forbidigo // the pause's length is the test's input: B works while A stays paused
	a.signal(syscall.SIGCONT)

	waitSQL(t, pool, 60*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	statsA, statsB := a.stop(t), b.stop(t)
	res := checkStorm(t, pool, true)
	dups := res.deliveries - res.distinctDelivered
	t.Logf("A: %+v", statsA)
	t.Logf("B: %+v", statsB)
	t.Logf("%d events, %d deliveries, %d duplicates", res.events, res.deliveries, dups)
	if res.lost != 0 || res.unpublished != 0 || res.phantom != 0 {
		t.Fatalf("lost %d, unpublished %d, phantom %d", res.lost, res.unpublished, res.phantom)
	}
	if statsA.FencedWrites == 0 {
		t.Fatal("the zombie's late marks were not fenced")
	}
	if statsA.LeasesLost == 0 || statsB.LeasesRescued == 0 {
		t.Fatalf("A lost %d leases, B rescued %d: the take-over was not recorded", statsA.LeasesLost, statsB.LeasesRescued)
	}
	if int64(dups) < statsA.FencedWrites {
		t.Fatalf("%d duplicates, fewer than the %d fenced marks (each fenced event is published again)", dups, statsA.FencedWrites)
	}
}

// Hand-over after a SIGKILL: another relay holds the dead relay's partitions within
// lease TTL + 1 s.
func TestHandOverAfterKill(t *testing.T) {
	t.Parallel()
	pool, cfg, a, b := twoRelaysSharing(t, 3*time.Second)
	a.kill()
	killed := time.Now()
	waitSQL(t, pool, 20*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, b.owner)
	if d := time.Since(killed); d > cfg.LeaseTTL+time.Second {
		t.Fatalf("partitions picked up %s after SIGKILL; want < TTL (%s) + 1s", d, cfg.LeaseTTL)
	} else {
		t.Logf("partitions picked up %s after SIGKILL (TTL %s)", d, cfg.LeaseTTL)
	}
}

// Hand-over after a graceful stop: the stopping relay releases its leases and wakes the
// others, which take the partitions within a second — not after the lease TTL, nor at
// their next lease round (TTL/3 = 2 s here).
func TestHandOverAfterGracefulStop(t *testing.T) {
	t.Parallel()
	pool, cfg, a, b := twoRelaysSharing(t, 6*time.Second)
	a.stop(t)
	stopped := time.Now()
	waitSQL(t, pool, 20*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, b.owner)
	d := time.Since(stopped)
	t.Logf("partitions picked up %s after the graceful stop (TTL %s)", d, cfg.LeaseTTL)
	if d > time.Second {
		t.Fatalf("partitions picked up %s after a graceful stop, want < 1s", d)
	}
}

// twoRelaysSharing starts relay processes A and B with the given lease TTL and waits
// until they hold 8 of the 16 partitions each.
func twoRelaysSharing(t *testing.T, ttl time.Duration) (*pgxpool.Pool, childConfig, *child, *child) {
	t.Helper()
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	if _, err := pool.Exec(context.Background(), deliveriesTable); err != nil {
		t.Fatal(err)
	}
	cfg := childConfig{Mode: relay.Ordered, LeaseTTL: ttl, BatchSize: 50, MaxPerAggregate: 4}
	a := startChild(t, connString, cfg)
	waitSQL(t, pool, 10*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, a.owner)
	b := startChild(t, connString, cfg)
	waitSQL(t, pool, 20*time.Second, 8, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, b.owner) // rebalanced
	return pool, cfg, a, b
}
