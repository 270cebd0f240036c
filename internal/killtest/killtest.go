// Package killtest runs the end-to-end kill test of a broker's sink and runner: a
// producer writes business rows and enqueues their events while a relay process and a
// consumer process (the test binary again, each running one role until it is killed) are
// SIGKILLed and restarted several times; then every event's effect must be in the
// effects table exactly once, per aggregate in version order.
//
// A broker's test package gives the roles' bodies (TestE2ERole, run in the child
// processes; [Role] tells which) and the environment the children need; [Run] does the
// rest. Only the standard library, pgx and this module are used, so every broker's module
// can share it.
package killtest

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// The environment of a child process.
const (
	// RoleEnv names the child's role ("relay" or "consumer"); unset in the parent.
	RoleEnv = "OUTBOX_E2E_ROLE"
	// DBEnv is the connection string of the test's database.
	DBEnv = "OUTBOX_E2E_DB"
	// EventsEnv sets the number of events of a run (default: the test's own).
	EventsEnv = "OUTBOX_E2E_EVENTS"
)

// The roles of the child processes.
const (
	RoleRelay    = "relay"
	RoleConsumer = "consumer"
)

// Role returns the role this process runs as, "" in the parent test process.
func Role() string { return os.Getenv(RoleEnv) }

// Database returns a fresh database (its connection string) with the effects table
// of Schema, for a kill test's run; it skips t in short mode (the run starts and kills
// processes).
func Database(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	url := pgtest.ConnString(t, nil)
	if _, err := pgtest.PoolFor(t, url).Exec(t.Context(), Schema); err != nil {
		t.Fatal(err)
	}
	return url
}

// Child starts a child process's role body: it skips t when this process is no child
// (a plain test run), else returns a context that ends on SIGTERM, a pool on the
// scenario's database, both closed when t ends, and the role to play.
func Child(t *testing.T) (ctx context.Context, pool *pgxpool.Pool, role string) {
	t.Helper()
	role = Role()
	if role == "" {
		t.Skip("a child process of TestSIGKILLedRelayAndConsumer")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	t.Cleanup(stop)
	pool, err := pgxpool.New(ctx, os.Getenv(DBEnv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ctx, pool, role
}

// Events returns the number of events a run sends: EventsEnv when set, else def.
func Events(t testing.TB, def int) int {
	t.Helper()
	s := os.Getenv(EventsEnv)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of events", EventsEnv, s)
	}
	return n
}

// Schema is the tables the test needs besides the outbox's and the inbox's: the
// business rows and the effects the consumer's handler writes (n orders them by when
// they were written: an aggregate's next effect is written only after the previous
// one committed, under the inbox's version lock; tx is the writing transaction, which
// holds more than one effect when an event unparked the ones after it).
const Schema = `CREATE TABLE effects (n bigserial, event_id uuid, aggregate_id text, version bigint, tx bigint DEFAULT txid_current());
	CREATE TABLE orders (id text PRIMARY KEY, version bigint NOT NULL)`

// Effect is the consumer's handler: it records the event's effect in its transaction.
func Effect(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
	if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id, aggregate_id, version) VALUES ($1, $2, $3)`, m.ID, m.AggregateID, m.AggregateVersion); err != nil {
		return fmt.Errorf("record the effect of %s: %w", m.ID, err)
	}
	return nil
}

// Flaky wraps h so that one event in every, chosen by its id, fails with a retryable
// error on its first fails attempts in this process: the runner's retry path (a record
// retried in place, a message through the retry queue) is busy whenever a process is
// killed.
func Flaky(h func(context.Context, pgx.Tx, outbox.Message) error, every uint32, fails int) func(context.Context, pgx.Tx, outbox.Message) error {
	var mu sync.Mutex
	attempts := map[uuid.UUID]int{}
	return func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		f := fnv.New32a()
		_, _ = f.Write(m.ID[:])
		if f.Sum32()%every == 0 {
			mu.Lock()
			attempts[m.ID]++
			n := attempts[m.ID]
			mu.Unlock()
			if n <= fails {
				return fmt.Errorf("event %s: downstream busy (attempt %d of %d that fail)", m.ID, n, fails)
			}
		}
		return h(ctx, tx, m)
	}
}

// Scenario is one kill test.
type Scenario struct {
	// DB is the connection string of the database; the parent's pool uses it, and the
	// children get it as DBEnv. It must hold the outbox and inbox tables and Schema.
	DB string
	// Env is the rest of the children's environment (broker addresses, names).
	Env []string
	// Events is how many events are written, over Aggregates aggregates.
	Events, Aggregates int
	// Rounds is how many times each of the relay and the consumer is killed.
	Rounds int
	// Timeout bounds each wait for progress. Default 60 s.
	Timeout time.Duration
}

// proc is a child process.
type proc struct{ cmd *exec.Cmd }

// spawn starts this test binary again running only the test TestE2ERole, as role, its
// output appended to log.
func (s *Scenario) spawn(t *testing.T, role string, log *os.File) *proc {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), os.Args[0], "-test.run=^TestE2ERole$", "-test.count=1", "-test.v") //nolint:gosec // G702: this test binary itself
	cmd.Env = append(append(os.Environ(), RoleEnv+"="+role, DBEnv+"="+s.DB), s.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the %s process: %v", role, err)
	}
	return &proc{cmd}
}

// kill SIGKILLs the process and reaps it.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// Run writes the events, kills and restarts the relay and the consumer Rounds times
// each while they flow, and checks the effects: each event's exactly once, none lost,
// per aggregate in version order. The children's output goes to a log file, shown when
// the test fails.
func Run(t *testing.T, s *Scenario) Result {
	t.Helper()
	if s.Timeout == 0 {
		s.Timeout = 60 * time.Second
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, s.DB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	log, err := os.Create(filepath.Join(t.TempDir(), "children.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("the children's output (last 8 KiB):\n%s", b[max(0, len(b)-8192):])
		}
		_ = log.Close()
	})
	spawn := func(role string) *proc { return s.spawn(t, role, log) }
	relayProc, consumerProc := spawn(RoleRelay), spawn(RoleConsumer)
	var mu sync.Mutex // the procs are replaced while the cleanup may run (after a Fatal)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		relayProc.kill()
		consumerProc.kill()
	})

	produced := make(chan error, 1)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() { produced <- produce(ctx, pool, s.Events, s.Aggregates, stop) }()

	count := func(q string) int {
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	effects := func() int { return count(`SELECT count(*) FROM effects`) }
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(s.Timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %s waiting for %s: %d effects of %d distinct events; %d events written, %d of them without an effect",
					s.Timeout, what, effects(), count(`SELECT count(DISTINCT event_id) FROM effects`), count(`SELECT count(*) FROM outbox.events`), count(noEffect))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	step := max(s.Events/(4*s.Rounds), 1)
	for round := 1; round <= s.Rounds; round++ {
		at := effects()
		wait(fmt.Sprintf("progress before relay kill %d", round), func() bool { return effects() >= min(at+step, s.Events) })
		mu.Lock()
		relayProc.kill()
		relayProc = spawn(RoleRelay)
		mu.Unlock()
		at = effects()
		wait(fmt.Sprintf("progress before consumer kill %d", round), func() bool { return effects() >= min(at+step, s.Events) })
		mu.Lock()
		consumerProc.kill()
		consumerProc = spawn(RoleConsumer)
		mu.Unlock()
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	wait("every effect", func() bool { return effects() >= s.Events })
	time.Sleep(200 * time.Millisecond) // a double effect committed just after the last one counts too
	if got, distinct := effects(), count(`SELECT count(DISTINCT event_id) FROM effects`); got != s.Events || distinct != s.Events {
		t.Fatalf("%d effects of %d distinct events, want %d of %d (0 lost, 0 doubled)", got, distinct, s.Events, s.Events)
	}
	if lost := count(noEffect); lost != 0 {
		t.Fatalf("%d committed events have no effect", lost)
	}
	if n := count(`SELECT count(*) FROM (SELECT version, lag(version) OVER (PARTITION BY aggregate_id ORDER BY n) AS prev FROM effects) e
		WHERE version <> coalesce(prev, 0) + 1`); n != 0 {
		t.Fatalf("%d effects out of version order", n)
	}
	return Result{Unparked: count(`SELECT count(*) - count(DISTINCT tx) FROM effects`)}
}

// noEffect counts the committed events without an effect.
const noEffect = `SELECT count(*) FROM outbox.events e WHERE NOT EXISTS (SELECT FROM effects f WHERE f.event_id = e.id)`

// Result is what a run saw besides its checks.
type Result struct {
	// Unparked counts effects applied in the transaction of an earlier version's event
	// (parked past a gap, applied when it closed).
	Unparked int
}

// produce writes events business rows and their events, one transaction each: event i
// is version i/aggregates+1 of aggregate o-(i%aggregates).
func produce(ctx context.Context, pool *pgxpool.Pool, events, aggregates int, stop <-chan struct{}) error {
	for i := range events {
		select {
		case <-stop:
			return nil
		default:
		}
		id, v := fmt.Sprintf("o-%d", i%aggregates), int64(i/aggregates+1)
		err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET version = excluded.version`, id, v); err != nil {
				return fmt.Errorf("write the order: %w", err)
			}
			return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
				AggregateType: "order", AggregateID: id, AggregateVersion: v, EventType: "order.changed",
				Payload: fmt.Appendf(nil, `{"v":%d}`, v),
			})
		})
		if err != nil {
			return fmt.Errorf("produce event %d: %w", i, err)
		}
	}
	return nil
}
