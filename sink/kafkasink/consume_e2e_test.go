package kafkasink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

// Producer (business row + Enqueue) → relay → Kafka (kfake, 3 partitions) → Runner →
// inbox: 1,000 events over 40 aggregates, the runner stopped and replaced twice
// mid-stream: every effect once, per aggregate in version order.
func TestProducerToInboxThroughKafka(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seeds := newCluster(t).ListenAddrs()
	const topic = "e2e.order"
	createTopic(t, newAdmin(t, seeds), topic, 3, nil)
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (n bigserial, event_id uuid, aggregate_id text, version bigint)`); err != nil {
		t.Fatal(err)
	}
	sink, err := kafkasink.New(&kafkasink.Config{Options: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Topic: "e2e.{{.AggregateType}}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	c, err := inbox.New(&inbox.Config{Name: "projection"})
	if err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, aggregate_id, version) VALUES ($1, $2, $3)`, m.ID, m.AggregateID, m.AggregateVersion)
		return err
	}
	start := func(run func(context.Context) error) (stop func()) {
		ctx, cancel := context.WithCancel(ctx)
		var once sync.Once
		done := make(chan error, 1)
		go func() { done <- run(ctx) }()
		stop = func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return stop
	}
	newRunner := func() func(context.Context) error {
		r, err := kafkasink.NewRunner(pool, c, handler, &kafkasink.RunnerConfig{
			Seeds: seeds, Group: "projection", Topics: []string{topic}, CommitInterval: 50 * time.Millisecond,
			ClientOpts: []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
		})
		if err != nil {
			t.Fatal(err)
		}
		return r.Run
	}
	rl, err := relay.New(pool, sink, &relay.Config{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(rl.Run)

	const aggregates, total = 40, 1000
	for i := range total {
		id, v := fmt.Sprintf("o-%d", i%aggregates), int64(i/aggregates+1)
		if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
			return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "order", AggregateID: id, AggregateVersion: v, EventType: "order.changed"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	effects := func() int { return countRows(t, pool, `SELECT count(*) FROM effects`) }
	stop := start(newRunner())
	waitUntil(t, "a third of the effects", func() bool { return effects() >= total/3 })
	stop()
	stop = start(newRunner())
	waitUntil(t, "two thirds of the effects", func() bool { return effects() >= 2*total/3 })
	stop()
	start(newRunner())
	waitUntil(t, "every effect", func() bool { return effects() >= total })
	if n := countRows(t, pool, `SELECT count(DISTINCT event_id) FROM effects`); n != total || effects() != total {
		t.Fatalf("%d effects of %d distinct events, want %d", effects(), n, total)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM (SELECT version, lag(version) OVER (PARTITION BY aggregate_id ORDER BY n) AS prev FROM effects) e
		WHERE version <> coalesce(prev, 0) + 1`); n != 0 {
		t.Fatalf("%d effects out of version order", n)
	}
}
