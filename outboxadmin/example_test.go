package outboxadmin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
)

// Mount the admin in a server, then replay every dead letter of one aggregate in one
// call: set-based, with an actor and a reason, audited.
func Example() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New(ctx, dsn), schema from outboxmigrate
	_ = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx),
			outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "order.created"},
			outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "order.paid"})
	})
	_, _ = pool.Exec(ctx, `UPDATE outbox.events SET dead_at = now()`) // as a relay would after refusals

	admin, err := outboxadmin.New(outboxadmin.Options{
		Pool:       pool,
		Token:      "a-long-random-secret-token", // from your secret store
		PathPrefix: "/outbox/",
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", admin)

	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/outbox/api/replay",
		strings.NewReader(`{"filter":{"aggregate_id":"o-1"},"actor":"alice","reason":"consumer fixed"}`))
	req.Header.Set("Authorization", "Bearer a-long-random-secret-token")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))

	var actor, reason string
	var n int
	_ = pool.QueryRow(ctx, `SELECT actor, reason, cardinality(event_ids) FROM outbox.replays`).Scan(&actor, &reason, &n)
	fmt.Println("audited:", actor, reason, n)
	// Output:
	// 200 {"action":"replay","affected":2,"audit_id":1,"filter":{"aggregate_id":"o-1"}}
	// audited: alice consumer fixed 2
}
