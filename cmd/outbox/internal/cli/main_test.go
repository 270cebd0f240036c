package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// TestMain allows the goroutine of the goaws server (one for the test binary: goaws
// keeps its state in globals; its connections end as their clients close them) and
// the one that starts the demo's PostgreSQL from a thread of its own (it lives as
// long as the process).
func TestMain(m *testing.M) {
	pgtest.Main(m, "github.com/outboxkit/outbox/cmd/outbox/internal/cli_test.goaws.",
		"github.com/outboxkit/outbox/cmd/outbox/internal/cli.startOnOneThread.func")
}

// canary is the database password of every test DSN: trust authentication ignores it,
// and it must appear in no output.
const canary = "Canary-PW-7f3a9c"

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the command in-process with env (KEY=VALUE) and args.
func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli.Main(ctx, args, cli.IO{In: strings.NewReader(""), Out: &out, Err: &errOut, Env: env})
	r := result{code, out.String(), errOut.String()}
	noSecret(t, r.stdout+r.stderr, canary)
	return r
}

// noSecret fails t when text holds secret.
func noSecret(t *testing.T, text, secret string) {
	t.Helper()
	if strings.Contains(text, secret) {
		t.Errorf("a secret was printed:\n%s", text)
	}
}

// database returns a fresh migrated database: its DSN (with the canary password) and a pool.
func database(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := withPassword(t, pgtest.ConnString(t, nil))
	return dsn, pgtest.PoolFor(t, dsn)
}

func withPassword(t *testing.T, dsn string) string {
	t.Helper()
	if !strings.Contains(dsn, "://") {
		return dsn + " password=" + canary
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), canary)
	return u.String()
}

// insert writes n events of type typ for aggregates agg/0 … agg/(n/per-1), per events
// each, created ago in the past.
func insert(t *testing.T, pool *pgxpool.Pool, typ, agg string, n, per int, ago time.Duration) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT gen_random_uuid(), $1, ((g - 1) / $4)::text, $2, jsonb_build_object('n', g), now() - $5::interval
		FROM generate_series(1, $3) AS g`, agg, typ, n, per, ago.String())
	if err != nil {
		t.Fatal(err)
	}
}

func scalar[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}
