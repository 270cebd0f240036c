package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// Apply an event once, however often the broker delivers it.
func ExampleProcess() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New(ctx, dsn), schema from outboxmigrate
	if _, err := pool.Exec(ctx, `CREATE TABLE stock (sku text PRIMARY KEY, reserved int NOT NULL)`); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO stock VALUES ('sku-1', 0)`); err != nil {
		panic(err)
	}
	reserve := func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		_, err := tx.Exec(ctx, `UPDATE stock SET reserved = reserved + 1 WHERE sku = 'sku-1'`)
		return err
	}
	msg := outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.placed", SchemaVersion: 1}

	for range 3 { // delivered three times
		res, err := inbox.Process(ctx, pool, "inventory", msg, reserve)
		if err != nil {
			fmt.Println("nak:", err) // redelivered later
			continue
		}
		fmt.Println(res.Outcome) // ack the broker now
	}
	var reserved int
	_ = pool.QueryRow(ctx, `SELECT reserved FROM stock`).Scan(&reserved)
	fmt.Println("reserved:", reserved)
	// Output:
	// applied
	// duplicate
	// duplicate
	// reserved: 1
}

// Versions past a gap wait in the park and are applied, in order, by the event that
// closes the gap.
func ExampleConsumer_Process_park() {
	ctx := context.Background()
	pool := pgtest.ExamplePool()
	c, err := inbox.New(&inbox.Config{Name: "projection", Gap: inbox.GapPark})
	if err != nil {
		panic(err)
	}
	apply := func(_ context.Context, _ pgx.Tx, msg outbox.Message) error {
		fmt.Println("  apply version", msg.AggregateVersion)
		return nil
	}
	for _, v := range []int64{1, 3, 4, 2, 3} {
		msg := outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", AggregateVersion: v, EventType: "order.changed", SchemaVersion: 1}
		fmt.Println("deliver version", v)
		res, err := c.Process(ctx, pool, msg, apply)
		if err != nil {
			panic(err)
		}
		fmt.Println("  ->", res.Outcome, "unparked:", len(res.Unparked))
	}
	s := c.Stats()
	fmt.Println("applied:", s.Applied, "parked:", s.Parked, "stale:", s.Stale)
	// Output:
	// deliver version 1
	//   apply version 1
	//   -> applied unparked: 0
	// deliver version 3
	//   -> parked unparked: 0
	// deliver version 4
	//   -> parked unparked: 0
	// deliver version 2
	//   apply version 2
	//   apply version 3
	//   apply version 4
	//   -> applied unparked: 2
	// deliver version 3
	//   -> stale unparked: 0
	// applied: 4 parked: 2 stale: 1
}

// An external effect (a payment) cannot commit with the inbox's record: send a stable
// idempotency key, so the API does not repeat the effect when a crash after the call
// makes the event come again.
func ExampleIdempotencyKey() {
	ctx := context.Background()
	pool := pgtest.ExamplePool()

	// The payment provider: it charges once per Idempotency-Key.
	var mu sync.Mutex
	charged := map[string]bool{}
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		if charged[key] {
			w.WriteHeader(http.StatusOK) // the same request again: already done
			return
		}
		charged[key] = true
		w.WriteHeader(http.StatusCreated)
	}))
	defer provider.Close()

	crash := true
	charge := func(ctx context.Context, _ pgx.Tx, msg outbox.Message) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL+"/charges", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", inbox.IdempotencyKey("payments", msg.ID))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		fmt.Println("provider answered", resp.StatusCode)
		if crash { // the consumer dies after the call, before its commit
			crash = false
			return errors.New("crashed before the commit")
		}
		return nil
	}
	msg := outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.paid", SchemaVersion: 1}
	for range 2 {
		res, err := inbox.Process(ctx, pool, "payments", msg, charge)
		if err != nil {
			fmt.Println("nak: redelivered later")
			continue
		}
		fmt.Println(res.Outcome)
	}
	fmt.Println("charges:", len(charged))
	// Output:
	// provider answered 201
	// nak: redelivered later
	// provider answered 200
	// applied
	// charges: 1
}
