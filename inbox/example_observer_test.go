package inbox_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// outcomeCounter is an Observer feeding counters (in your code: a Prometheus counter
// vector by outcome, and a histogram of HandlerDuration).
type outcomeCounter struct{ applied, duplicates, parked, unparked atomic.Int64 }

func (o *outcomeCounter) Processed(r inbox.Report) {
	o.applied.Add(int64(r.Applied))
	o.duplicates.Add(int64(r.Duplicates))
	o.parked.Add(int64(r.Parked))
	o.unparked.Add(int64(r.Unparked))
}

// Count what a consumer does with Config.Observer.
func ExampleObserver() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New(ctx, dsn), schema from outboxmigrate
	obs := &outcomeCounter{}
	c, err := inbox.New(&inbox.Config{Name: "search-index", Observer: obs})
	if err != nil {
		panic(err)
	}
	index := func(context.Context, pgx.Tx, outbox.Message) error { return nil }
	event := func(v int64) outbox.Message {
		return outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", AggregateVersion: v, EventType: "order.changed", SchemaVersion: 1}
	}
	v1, v2, v3 := event(1), event(2), event(3)
	for _, m := range []outbox.Message{v1, v3, v1, v2} { // v3 parks; v1 again is a duplicate; v2 closes the gap
		if _, err := c.Process(ctx, pool, m, index); err != nil {
			panic(err)
		}
	}
	fmt.Println("applied", obs.applied.Load(), "duplicates", obs.duplicates.Load(), "parked", obs.parked.Load(), "unparked", obs.unparked.Load())
	// Output: applied 3 duplicates 1 parked 1 unparked 1
}
