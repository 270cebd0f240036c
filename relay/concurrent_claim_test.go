package relay_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Ordered claims racing committed updates of the rows they picked: two batches in flight
// at once (Concurrency 2), transient failures putting heads back (a new row version each
// time), and a writer out of band updating pending rows all along. A head changed after a
// claim's snapshot must be a gap for that claim — never locked at its new version while
// its followers go out (the claim compares the locked rows with the picked ones by
// identity). First deliveries stay in order per aggregate.
func TestOrderedClaimsRacingUpdatesOfTheirHeads(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("r", 40), 25) // 1,000 events
	sink := &memsink.Sink{}
	var mu sync.Mutex
	tried := map[string]bool{}
	sink.FailFunc = func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !tried[m.ID.String()] && rand.N(3) == 0 { //nolint:gosec // test randomness
			tried[m.ID.String()] = true
			return errors.New("broker: 503")
		}
		return nil
	}
	cfg := fastConfig()
	cfg.Concurrency, cfg.BatchSize, cfg.MaxPerAggregate, cfg.MaxAttempts = 2, 10, 5, 100
	cfg.RetryBaseDelay, cfg.RetryMaxDelay = time.Millisecond, 5*time.Millisecond
	start(t, newRelay(t, pool, sink, cfg))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			_, _ = pool.Exec(ctx, `UPDATE outbox.events SET last_error = coalesce(last_error, 'touched')
				WHERE seq IN (SELECT seq FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL ORDER BY random() LIMIT 5)`)
		}
	})
	waitSQL(t, pool, 60*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	cancel()
	wg.Wait()
	checkOrder(t, sink.Messages())
	if n := distinctIDs(sink.Messages()); n != 1000 {
		t.Fatalf("%d distinct events delivered, want 1000", n)
	}
}
