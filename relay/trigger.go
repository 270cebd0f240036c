package relay

import (
	"cmp"
	"context"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// InstallNotifyTrigger installs the opt-in wake-up trigger on schema's events table: after
// every INSERT statement it notifies [outbox.WakeupChannel](schema), so relays listening
// with [WakeupListen] wake within milliseconds whoever wrote the events — also writers
// that use neither [outbox.WithTx] nor [outbox.Notifier] (raw SQL, other languages).
//
// The cost falls on every writer: the NOTIFY runs inside their transaction, and
// PostgreSQL serialises the commits of all transactions that issued NOTIFY behind one
// global lock (the reason the default path, [outbox.Notifier], notifies after commit
// from outside the transaction). Prefer the Notifier unless writers cannot use it.
//
// db is a pool, a connection or a transaction (e.g. the one running your migrations);
// schema "" means "outbox".
// Installing is idempotent and safe from many processes at once; it needs PostgreSQL 14
// or later and the right to create functions and triggers in schema. Remove the trigger
// with [UninstallNotifyTrigger].
func InstallNotifyTrigger(ctx context.Context, db outbox.Execer, schema string) error {
	return execTriggerDDL(ctx, db, schema, "notify_trigger_install", "install notify trigger")
}

// UninstallNotifyTrigger removes the trigger installed by [InstallNotifyTrigger] and its
// function. It is idempotent: without the trigger it does nothing.
func UninstallNotifyTrigger(ctx context.Context, db outbox.Execer, schema string) error {
	return execTriggerDDL(ctx, db, schema, "notify_trigger_uninstall", "uninstall notify trigger")
}

func execTriggerDDL(ctx context.Context, db outbox.Execer, schema, query, what string) error {
	if db == nil {
		return fmt.Errorf("%s: db is nil", what)
	}
	schema = cmp.Or(schema, sqlq.DefaultSchema)
	quoted, err := sqlq.QuoteSchema(schema)
	if err != nil {
		return fmt.Errorf("%s: schema: %w", what, err)
	}
	// Several statements, no arguments: pgx sends them in one simple-protocol query,
	// which PostgreSQL runs as one transaction (the advisory lock lasts until its end).
	if _, err := db.Exec(ctx, sqlq.Query(query, quoted)); err != nil {
		return fmt.Errorf("%s on schema %s: %w", what, schema, err)
	}
	return nil
}
