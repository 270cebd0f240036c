package benchdb

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// Throughput runs tx from clients goroutines in a closed loop for d, each call with a
// random account id in [1, Accounts], and returns the completed calls per second. The
// first error stops every client and is returned.
func Throughput(ctx context.Context, clients int, d time.Duration, tx func(ctx context.Context, accountID int) error) (float64, error) {
	var stop atomic.Bool
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	seed := uint64(time.Now().UnixNano()) //nolint:gosec // a seed, not a conversion that matters
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(c))) //nolint:gosec // load generation, not security
		g.Go(func() error {
			for !stop.Load() {
				if err := tx(gctx, 1+rng.IntN(Accounts)); err != nil {
					return err
				}
				done.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}
