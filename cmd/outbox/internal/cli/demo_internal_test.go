package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// TestDemoWithoutPostgresBinaries: with no DATABASE_URL and no server binaries, the
// demo fails at once with a message naming the package to install.
func TestDemoWithoutPostgresBinaries(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := postgresBinGlob
	postgresBinGlob = t.TempDir() + "/*/bin"
	t.Cleanup(func() { postgresBinGlob = old })
	var out, errOut bytes.Buffer
	code := Main(t.Context(), []string{"demo", "--duration", "1s"}, IO{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != ExitFailure {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, ExitFailure, out.String(), errOut.String())
	}
	for _, want := range []string{"no PostgreSQL server binaries", "apt install postgresql", "--database-url"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
}

// The demo's commit→consume latency starts just before the producer sends COMMIT: the
// commit clock takes the time of an order's COMMIT, not of its INSERT (created_at,
// the transaction's start), also through the orders service itself; a rolled-back
// order has none.
func TestCommitClockTakesTheTimeBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := newCommitClock()
	pc, err := pgxpool.ParseConfig(pgtest.ConnString(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = clock
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := orders.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}

	// The orders service's own transaction.
	svc, err := orders.NewService(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	before := time.Now()
	o, err := svc.PlaceOrder(ctx, orders.Order{Customer: "c", SKU: "s", Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	sent, ok := clock.take(o.ID)
	if !ok || sent.Before(before) || sent.After(after) {
		t.Errorf("the service's order: commit time %v (taken %v), want one within its PlaceOrder call [%v, %v]", sent, ok, before, after)
	}
	if _, ok := clock.take(o.ID); ok {
		t.Error("a commit time is taken twice")
	}

	// A transaction that waits between its INSERT and its COMMIT: the time is the
	// COMMIT's.
	const pause = 300 * time.Millisecond
	insert := `INSERT INTO orders (id, customer, sku, quantity) VALUES ($1, 'c', 's', 1)`
	slow := outbox.NewID()
	var inserted time.Time
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insert, slow); err != nil {
			return err
		}
		inserted = time.Now()
		time.Sleep(pause)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	sent, ok = clock.take(slow)
	if !ok || sent.Sub(inserted) < pause || sent.After(committed) {
		t.Errorf("commit time %v after the INSERT (taken %v), want at least the %v pause and before the commit returned (%v after)", sent.Sub(inserted), ok, pause, committed.Sub(inserted))
	}

	rolledBack := outbox.NewID()
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insert, rolledBack); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("the transaction committed")
	}
	if _, ok := clock.take(rolledBack); ok {
		t.Error("a rolled-back order has a commit time")
	}
}
