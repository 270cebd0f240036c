package natssink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/natssink"
)

// Producer (business row + Enqueue, one transaction) → relay → JetStream → Runner →
// inbox, on a consumer database of its own (the inbox set alone): 2,000 events over 50
// aggregates, the relay and the runner each stopped mid-stream and replaced: every
// committed event's effect exactly once, per aggregate in version order, none lost.
func TestProducerToInboxEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	producer := pgtest.Pool(t)
	if _, err := producer.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	consumerDB := pgtest.PoolFor(t, pgtest.ConnString(t, &pgtest.Options{Empty: true}))
	m, err := outboxmigrate.New(&outboxmigrate.Config{Sets: []outboxmigrate.Set{outboxmigrate.SetInbox}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, consumerDB); err != nil {
		t.Fatal(err)
	}
	if _, err := consumerDB.Exec(ctx, `CREATE TABLE effects (n bigserial, event_id uuid, aggregate_id text, version bigint)`); err != nil {
		t.Fatal(err)
	}
	_, js := connect(t, startServer(t).ClientURL())
	st := createStream(t, js, "outbox")
	sink, err := natssink.New(ctx, js, &natssink.Config{Stream: st.CachedInfo().Config.Name})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstreamConsumerConfig("inventory"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(&inbox.Config{Name: "inventory"})
	if err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, aggregate_id, version) VALUES ($1, $2, $3)`, m.ID, m.AggregateID, m.AggregateVersion)
		return err
	}

	start := func(run func(context.Context) error) (stop func()) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}
	newRelay := func() func(context.Context) error {
		r, err := relay.New(producer, sink, &relay.Config{PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return r.Run
	}
	newRunner := func() func(context.Context) error {
		r, err := natssink.NewRunner(cons, consumerDB, c, handler, &natssink.RunnerConfig{Workers: 8, RetryDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return r.Run
	}

	const aggregates, total = 50, 2000
	var wg sync.WaitGroup
	wg.Go(func() { // the producer
		for i := range total {
			id, v := fmt.Sprintf("o-%d", i%aggregates), int64(i/aggregates+1)
			err := outbox.WithTx(ctx, producer, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET version = excluded.version`, id, v); err != nil {
					return err
				}
				return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
					AggregateType: "order", AggregateID: id, AggregateVersion: v, EventType: "order.changed", Payload: fmt.Appendf(nil, `{"v":%d}`, v),
				})
			})
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	effects := func() int { return countRows(t, consumerDB, `SELECT count(*) FROM effects`) }
	stopRelay, stopRunner := start(newRelay()), start(newRunner())
	waitUntil(t, "a quarter of the effects", func() bool { return effects() >= total/4 })
	stopRelay() // the relay goes away mid-stream; another takes over
	stopRelay = start(newRelay())
	waitUntil(t, "half of the effects", func() bool { return effects() >= total/2 })
	stopRunner() // so does the consumer
	stopRunner = start(newRunner())
	wg.Wait()
	waitUntil(t, "every effect", func() bool { return effects() >= total })
	stopRelay()
	stopRunner()

	if n := countRows(t, consumerDB, `SELECT count(DISTINCT event_id) FROM effects`); n != total || effects() != total {
		t.Fatalf("%d effects of %d distinct events, want %d of %d", effects(), n, total, total)
	}
	if n := countRows(t, consumerDB, `SELECT count(*) FROM (SELECT aggregate_id, version, n, lag(version) OVER (PARTITION BY aggregate_id ORDER BY n) AS prev FROM effects) e
		WHERE version <> coalesce(prev, 0) + 1`); n != 0 {
		t.Fatalf("%d effects out of version order", n)
	}
	t.Logf("stats %+v", c.Stats())
}
