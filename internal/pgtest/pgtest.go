// Package pgtest gives each test its own PostgreSQL database, migrated to the current
// outbox schema, created from a template so it costs a file copy rather than a migration.
//
// The server is TEST_DATABASE_URL when that is set (the role must be allowed to create
// databases); otherwise a throwaway cluster started from the PostgreSQL binaries for
// this test process (see [Cluster]), stopped by [Main] when the tests end.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/leaktest"
	"github.com/outboxkit/outbox/outboxmigrate"
)

var (
	serverOnce sync.Once
	serverErr  error
	adminURL   string   // a connection string to the server's "postgres" database
	cluster    *Cluster // non-nil when this process started its own
	counter    atomic.Int64

	templateMu   sync.Mutex
	templateDone = map[string]bool{}
)

// Main runs the package's tests, drops the examples' databases, fails the run when the
// tests left goroutines running (see [leaktest.Check]; allowed are those of the cluster
// this process started, and those named by the prefixes in allowed), and then stops
// that cluster. Call it from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M, allowed ...string) {
	code := m.Run()
	runExampleCleanups()
	// Checked while the server still runs: a goroutine left waiting on it would end, and
	// hide, once it stops.
	code = leaktest.Exit(code, append(allowed, clusterGoroutines...)...)
	if cluster != nil {
		if err := cluster.Destroy(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// clusterGoroutines are the functions of the goroutines the cluster runs while it is up
// (one waits for the postmaster to exit, one starts it from a thread of its own).
var clusterGoroutines = []string{
	"github.com/outboxkit/outbox/internal/pgtest.(*Cluster).Start.func",
	"github.com/outboxkit/outbox/internal/pgtest.startOnLockedThread.func",
}

func server() (string, error) {
	serverOnce.Do(func() {
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			adminURL = u
			return
		}
		c, err := StartCluster()
		if err != nil {
			serverErr = err
			return
		}
		cluster = c
		adminURL = c.ConnString("postgres")
	})
	return adminURL, serverErr
}

// withDatabase returns connString (URL or keyword/value form) with its database replaced by db.
func withDatabase(connString, db string) (string, error) {
	if !strings.Contains(connString, "://") {
		return connString + " dbname=" + db, nil // a later keyword wins
	}
	u, err := url.Parse(connString)
	if err != nil {
		return "", fmt.Errorf("pgtest: parse TEST_DATABASE_URL: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

func adminConn(ctx context.Context) (*pgx.Conn, error) {
	u, err := server()
	if err != nil {
		return nil, err
	}
	return pgx.Connect(ctx, u)
}

// templateName names the template database after the migrations' content, so a
// changed migration gets a new template.
func templateName() (string, error) {
	m, err := outboxmigrate.New(nil)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, mig := range m.Migrations() {
		h.Write([]byte(mig.SQL))
	}
	return "outbox_tpl_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ensureTemplate creates the migrated template database once per server. Several test
// processes may race here: a session advisory lock on a dedicated (unpooled)
// connection serialises them.
func ensureTemplate(ctx context.Context) (string, error) {
	name, err := templateName()
	if err != nil {
		return "", err
	}
	templateMu.Lock()
	defer templateMu.Unlock()
	if templateDone[name] {
		return name, nil
	}
	conn, err := adminConn(ctx)
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(1869968756)"); err != nil {
		return "", fmt.Errorf("pgtest: lock: %w", err)
	}
	defer func() { _, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock(1869968756)") }()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("pgtest: look up template: %w", err)
	}
	if !exists {
		ident := pgx.Identifier{name}.Sanitize()
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
			return "", fmt.Errorf("pgtest: create template: %w", err)
		}
		if err := migrate(ctx, name); err != nil {
			return "", err
		}
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH IS_TEMPLATE true"); err != nil {
			return "", fmt.Errorf("pgtest: mark template: %w", err)
		}
	}
	templateDone[name] = true
	return name, nil
}

func migrate(ctx context.Context, db string) error {
	u, err := withDatabase(adminURL, db)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("pgtest: connect to %s: %w", db, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	m, err := outboxmigrate.New(nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, conn); err != nil {
		return fmt.Errorf("pgtest: migrate %s: %w", db, err)
	}
	return nil
}

// Options tune [NewDatabase].
type Options struct {
	// Empty creates an empty database instead of one migrated to the current schema.
	Empty bool
}

// ConnString creates a fresh database for t (dropped when t ends) and returns a
// connection string to it. With opts nil the database is migrated (schema "outbox").
func ConnString(t testing.TB, opts *Options) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if opts == nil {
		opts = &Options{}
	}
	conn, err := adminConn(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := fmt.Sprintf("outbox_test_%d_%d", os.Getpid(), counter.Add(1))
	ident := pgx.Identifier{name}.Sanitize()
	create := "CREATE DATABASE " + ident
	if !opts.Empty {
		tpl, err := ensureTemplate(ctx)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		create += " TEMPLATE " + pgx.Identifier{tpl}.Sanitize()
	}
	if _, err := conn.Exec(ctx, create); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := adminConn(ctx)
		if err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(adminURL, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Pool returns a pool on a fresh migrated database for t, closed when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolFor(t, ConnString(t, nil))
}

// PoolFor returns a pool on connString, closed when t ends.
func PoolFor(t testing.TB, connString string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatalf("pgtest: parse pool config: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// cleanupT collects cleanups for databases made outside a test (examples); [Main] runs them.
type cleanupT struct {
	testing.TB
	mu  sync.Mutex
	fns []func()
}

func (c *cleanupT) Helper()                        {}
func (c *cleanupT) Cleanup(f func())               { c.mu.Lock(); c.fns = append(c.fns, f); c.mu.Unlock() }
func (c *cleanupT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (c *cleanupT) Errorf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
func (c *cleanupT) Fatal(a ...any)                 { panic(fmt.Sprint(a...)) }

var exampleT = &cleanupT{}

// ExamplePool returns a pool on a fresh migrated database for an Example function;
// [Main] drops it when the tests end.
func ExamplePool() *pgxpool.Pool {
	return PoolFor(exampleT, ConnString(exampleT, nil))
}

func runExampleCleanups() {
	exampleT.mu.Lock()
	fns := exampleT.fns
	exampleT.fns = nil
	exampleT.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}
