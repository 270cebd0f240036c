package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// On a database that was never migrated, Enqueue and the relay say so and name the fix,
// instead of a bare "relation "outbox.events" does not exist".
func TestNotMigratedSaysSo(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.ConnString(t, &pgtest.Options{Empty: true}))
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, outbox.ErrNotMigrated) {
			t.Errorf("%s: %v, want an error matching ErrNotMigrated", what, err)
			return
		}
		for _, want := range []string{`"outbox"`, "outbox migrate", "outboxmigrate"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name %s", what, err, want)
			}
		}
	}
	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "e", Payload: []byte(`{}`)})
	})
	check("Enqueue", err)

	r, err := relay.New(pool, &memsink.Sink{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	check("relay.Run", r.Run(rctx))

	_, err = inbox.Process(ctx, pool, "billing", outbox.Message{
		ID: uuid.New(), AggregateType: "order", AggregateID: "1", EventType: "e", SchemaVersion: 1, Payload: []byte(`{}`),
	}, func(context.Context, pgx.Tx, outbox.Message) error { return nil })
	check("inbox.Process", err)
}
