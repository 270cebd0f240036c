package natssink_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// publishRaw publishes m in the shared format without a Nats-Msg-Id, so the stream
// keeps every copy: the duplicates a consumer must collapse.
func publishRaw(ctx context.Context, t *testing.T, js jetstream.JetStream, subject string, m outbox.Message) {
	t.Helper()
	enc, err := sinkformat.NewEncoder(sinkformat.NATS, sinkformat.Outbox, "")
	if err != nil {
		t.Fatal(err)
	}
	hs, err := enc.Headers(m)
	if err != nil {
		t.Fatal(err)
	}
	nm := nats.NewMsg(subject)
	for _, h := range hs {
		nm.Header.Set(h.Name, h.Value)
	}
	nm.Data = m.Payload
	if _, err := js.PublishMsg(ctx, nm); err != nil {
		t.Fatal(err)
	}
}

// jetstreamConsumerConfig is a durable pull consumer with explicit acks and a short
// AckWait, so a lost ack is redelivered within the test.
func jetstreamConsumerConfig(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxAckPending: 1000}
}

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
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// Every event of a stream full of duplicates, out-of-order versions and transient
// handler failures is applied exactly once, per aggregate in version order, across a
// runner stopped mid-stream and a second one that takes over.
func TestRunnerEffectsExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := startServer(t)
	_, js := connect(t, srv.ClientURL())
	st := createStream(t, js, "inboxrun")
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (n bigserial, event_id uuid, aggregate_id text, version bigint)`); err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstreamConsumerConfig("billing"))
	if err != nil {
		t.Fatal(err)
	}

	const aggregates, versions = 20, 10
	var msgs []outbox.Message
	for a := range aggregates {
		for v := int64(1); v <= versions; v++ {
			msgs = append(msgs, outbox.Message{
				ID: outbox.NewID(), AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", a), AggregateVersion: v,
				EventType: "order.changed", SchemaVersion: 1, ContentType: outbox.ContentTypeJSON,
				Payload: fmt.Appendf(nil, `{"v":%d}`, v), CreatedAt: time.Now(),
			})
		}
	}
	copies := append(slices.Clone(msgs), msgs...) // every event twice
	rand.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
	for _, m := range copies {
		publishRaw(ctx, t, js, "inboxrun."+m.AggregateID, m)
	}

	c, err := inbox.New(&inbox.Config{Name: "billing"}) // GapPark
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	failed := map[uuid.UUID]bool{}
	handler := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		mu.Lock()
		fail := m.AggregateVersion%4 == 0 && !failed[m.ID]
		failed[m.ID] = true
		mu.Unlock()
		if fail {
			return fmt.Errorf("transient failure of %s", m.ID) // Nak'ed, redelivered
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, aggregate_id, version) VALUES ($1, $2, $3)`, m.ID, m.AggregateID, m.AggregateVersion)
		return err
	}
	run := func(ctx context.Context) (stop func()) {
		r, err := natssink.NewRunner(cons, pool, c, handler, &natssink.RunnerConfig{Workers: 4, RetryDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	total := aggregates * versions
	stop := run(ctx)
	waitUntil(t, "a quarter of the effects", func() bool { return countRows(t, pool, `SELECT count(*) FROM effects`) >= total/4 })
	stop() // the first instance stops mid-stream
	stop = run(ctx)
	defer stop()
	waitUntil(t, "every effect", func() bool { return countRows(t, pool, `SELECT count(*) FROM effects`) >= total })

	if n := countRows(t, pool, `SELECT count(DISTINCT event_id) FROM effects`); n != total {
		t.Fatalf("%d distinct events applied, want %d", n, total)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM effects`); n != total {
		t.Fatalf("%d effects for %d events: some applied twice", n, total)
	}
	for a := range aggregates {
		rows, err := pool.Query(ctx, `SELECT version FROM effects WHERE aggregate_id = $1 ORDER BY n`, fmt.Sprintf("o-%d", a))
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != int64(i+1) {
				t.Fatalf("aggregate o-%d applied %v, want 1…%d in order", a, got, versions)
			}
		}
	}
	if n := countRows(t, pool, `SELECT count(*) FROM outbox.inbox_parked`); n != 0 {
		t.Fatalf("%d events left parked", n)
	}
	if s := c.Stats(); s.Duplicates == 0 || s.Parked == 0 {
		t.Fatalf("stats %+v: want duplicates and parked events (the stream holds both)", s)
	}
}

func TestNewRunnerValidates(t *testing.T) {
	t.Parallel()
	c, err := inbox.New(&inbox.Config{Name: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, pgx.Tx, outbox.Message) error { return nil }
	if _, err := natssink.NewRunner(nil, nil, c, h, nil); err == nil {
		t.Fatal("a nil consumer accepted")
	}
}
