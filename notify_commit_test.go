package outbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// The wake-up statement (the Notifier's, and the relay listener's self-test) commits
// asynchronously: NOTIFY makes it a write transaction, and its commit need not wait for
// a WAL flush the writers' commits compete with. The setting lasts only for that
// transaction.
func TestNotifyCommitsAsynchronously(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	notify := sqlq.Query("notify", "")

	// Autocommit: the statement is its own transaction. Sent with a second statement in
	// one simple-protocol message, both run in one implicit transaction, so the second
	// reads the setting the first left for the rest of it.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The test cluster commits asynchronously throughout; a server as deployed does not.
	mustExec(t, conn, "SET synchronous_commit = on")
	defer mustExec(t, conn, "RESET synchronous_commit")
	literal := strings.NewReplacer("$1", "'outbox_test_async'", "$2", "''").Replace(notify)
	results, err := conn.Conn().PgConn().Exec(ctx, literal+";\nSELECT current_setting('synchronous_commit')").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(results[len(results)-1].Rows[0][0]); got != "off" {
		t.Errorf("synchronous_commit in the notify statement's own transaction = %q, want off", got)
	}
	var after string
	if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != "on" {
		t.Errorf("synchronous_commit after the notify statement's transaction = %q, want on (the setting is the transaction's only)", after)
	}
}
