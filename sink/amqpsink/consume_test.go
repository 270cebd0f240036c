package amqpsink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// Every event of a queue holding duplicates and transient handler failures is applied
// once (a crash between commit and ack is the duplicate's case: the broker redelivers); a failed message comes back through the retry queue, RetryDelay later — not in
// an immediate requeue loop.
func TestRunnerRetriesThroughTheRetryQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := newTopology(t, "#")
	retryQueue := tp.queue + ".retry"
	t.Cleanup(func() {
		if ch, err := tp.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(retryQueue, false, false, false)
			_ = ch.Close()
		}
	})
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (event_id uuid, aggregate_id text)`); err != nil {
		t.Fatal(err)
	}
	enc, err := sinkformat.NewEncoder(sinkformat.AMQP, sinkformat.Outbox, "")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tp.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	const n = 30
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i), EventType: "order.paid", SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, Payload: []byte(`{}`)}
		hs, err := enc.Headers(msgs[i])
		if err != nil {
			t.Fatal(err)
		}
		table := amqp.Table{}
		for _, h := range hs {
			table[h.Name] = h.Value
		}
		copies := 2 // every message twice, but those that fail once: their second call is the retry
		if i%5 == 0 {
			copies = 1
		}
		for range copies {
			if err := ch.PublishWithContext(ctx, "", tp.queue, true, false, amqp.Publishing{Headers: table, ContentType: msgs[i].ContentType, Body: msgs[i].Payload, DeliveryMode: amqp.Persistent}); err != nil {
				t.Fatal(err)
			}
		}
	}

	c, err := inbox.New(&inbox.Config{Name: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	const retryDelay = 300 * time.Millisecond
	var mu sync.Mutex
	firstFailure := map[uuid.UUID]time.Time{}
	var gaps []time.Duration
	handler := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		mu.Lock()
		if i := indexOf(msgs, m.ID); i%5 == 0 {
			if at, failed := firstFailure[m.ID]; !failed {
				firstFailure[m.ID] = time.Now()
				mu.Unlock()
				return fmt.Errorf("payment provider timeout for %s", m.AggregateID)
			} else if len(gaps) < n {
				gaps = append(gaps, time.Since(at))
			}
		}
		mu.Unlock()
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, m.ID, m.AggregateID)
		return err
	}
	r, err := amqpsink.NewRunner(pool, c, handler, &amqpsink.RunnerConfig{URL: brokerURL(brokerAddr), Queue: tp.queue, Workers: 4, RetryDelay: retryDelay})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	count := func(q string, args ...any) int {
		var k int
		if err := pool.QueryRow(ctx, q, args...).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for count(`SELECT count(DISTINCT event_id) FROM effects`) < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %d of %d events applied", count(`SELECT count(DISTINCT event_id) FROM effects`), n)
		}
		<-tick.C
	}
	if got := count(`SELECT count(*) FROM effects`); got != n {
		t.Fatalf("%d effects for %d events", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(firstFailure) != n/5 {
		t.Fatalf("%d events failed once, want %d", len(firstFailure), n/5)
	}
	for _, g := range gaps {
		if g < retryDelay*9/10 {
			t.Fatalf("a failed message came back after %s, before the retry delay %s: an immediate requeue", g, retryDelay)
		}
	}
}

func indexOf(msgs []outbox.Message, id uuid.UUID) int {
	for i, m := range msgs {
		if m.ID == id {
			return i
		}
	}
	return -1
}
