package kafkasink_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

func countRows(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// committed returns the group's committed offset of topic's partition 0 (-1: none).
func committed(t *testing.T, adm *kadm.Client, group, topic string) int64 {
	t.Helper()
	resp, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		return -1
	}
	o, ok := resp.Lookup(topic, 0)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}

// The runner commits only the contiguous completed offset: offset N retrying, N+1…N+k
// done, the committed offset stays at N; the runner stopped ("killed") and another
// started, N is applied, and N+1…N+k come again as duplicates: every effect once.
func TestRunnerNeverCommitsPastARetryingRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seeds := newCluster(t).ListenAddrs()
	adm := newAdmin(t, seeds)
	const topic, group, n, blocked = "inbox-orders", "billing", 20, 5
	createTopic(t, adm, topic, 1, nil)
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (event_id uuid, aggregate_id text)`); err != nil {
		t.Fatal(err)
	}

	enc, err := sinkformat.NewEncoder(sinkformat.Kafka, sinkformat.Outbox, "")
	if err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: "order.paid", SchemaVersion: 1}
		hs, err := enc.Headers(msgs[i])
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: topic, Partition: 0, Key: []byte(msgs[i].AggregateID)}
		for _, h := range hs {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)})
		}
		if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	c, err := inbox.New(&inbox.Config{Name: group})
	if err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	failing.Store(true)
	handler := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if m.ID == msgs[blocked].ID && failing.Load() {
			return fmt.Errorf("downstream of %s is down", m.AggregateID)
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, m.ID, m.AggregateID)
		return err
	}
	start := func() (stop func()) {
		r, err := kafkasink.NewRunner(pool, c, handler, &kafkasink.RunnerConfig{
			Seeds: seeds, Group: group, Topics: []string{topic}, Workers: 64,
			RetryDelay: 20 * time.Millisecond, CommitInterval: 20 * time.Millisecond,
			ClientOpts: []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var runErr error
		wg.Go(func() { runErr = r.Run(ctx) })
		var once sync.Once
		halt := func() {
			once.Do(func() {
				cancel()
				wg.Wait()
				if runErr != nil {
					t.Errorf("Run: %v", runErr)
				}
			})
		}
		t.Cleanup(halt) // also when the test fails before it stops the runner
		return halt
	}
	effects := func() int { return countRows(t, pool, `SELECT count(*) FROM effects`) }

	stop := start()
	// Records before N done, and most after it (those sharing N's worker wait behind it).
	waitUntil(t, "the records around the blocked one", func() bool { return effects() >= n-4 })
	waitUntil(t, "a commit", func() bool { return committed(t, adm, group, topic) >= blocked })
	if got := committed(t, adm, group, topic); got != blocked {
		t.Fatalf("committed offset %d with offset %d still retrying: the commit went past it", got, blocked)
	}
	stop() // the consumer goes away with N undone
	if got := committed(t, adm, group, topic); got != blocked {
		t.Fatalf("committed offset %d after the stop, want %d", got, blocked)
	}

	failing.Store(false)
	start()
	waitUntil(t, "every effect", func() bool { return effects() >= n })
	waitUntil(t, "the commit of everything", func() bool { return committed(t, adm, group, topic) == n })
	if got, distinct := effects(), countRows(t, pool, `SELECT count(DISTINCT event_id) FROM effects`); got != n || distinct != n {
		t.Fatalf("%d effects of %d distinct events, want %d", got, distinct, n)
	}
	if countRows(t, pool, `SELECT count(*) FROM effects WHERE event_id = $1`, msgs[blocked].ID) != 1 {
		t.Fatal("the blocked record was lost")
	}
	if s := c.Stats(); s.Duplicates == 0 {
		t.Fatalf("stats %+v: the records after N should have come again as duplicates", s)
	}
}
