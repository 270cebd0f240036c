package relay_test

// Relay processes for fault tests: the test binary re-executes itself as a relay
// (runChild), so tests can SIGKILL, SIGSTOP and SIGTERM real processes. Each child's
// sink records every delivery in the storm_deliveries table, outside the relay's
// transaction, before it reports success: the record survives the child.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/relay"
)

const (
	childEnv       = "OUTBOX_RELAY_CHILD_DSN"
	childConfigEnv = "OUTBOX_RELAY_CHILD_CONFIG"
	statsPrefix    = "RELAY-STATS "
	readyPrefix    = "RELAY-READY "
	publishingLine = "RELAY-PUBLISHING"
	recordedLine   = "RELAY-RECORDED"
)

// childConfig is what a child relay process runs with.
type childConfig struct {
	Mode            relay.Mode
	LeaseTTL        time.Duration
	BatchSize       int
	MaxPerAggregate int
	PublishDelay    time.Duration // the sink's latency per call
	Announce        bool          // print publishingLine when a publish starts
	// AckDelay, when set, is how long the sink waits after recording a call's
	// deliveries before it returns; it prints recordedLine when it starts waiting, so a
	// test can kill the process after the broker has the messages and before the relay
	// has recorded them published.
	AckDelay time.Duration
	// SlowPublish is the relay's; 0: the default
	SlowPublish time.Duration
}

const deliveriesTable = `CREATE TABLE IF NOT EXISTS storm_deliveries (
	n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id uuid NOT NULL, aggregate_id text NOT NULL, version bigint NOT NULL, pid int NOT NULL,
	at timestamptz NOT NULL DEFAULT clock_timestamp())`

// recordingSink writes each batch's messages to storm_deliveries, then acks them.
type recordingSink struct {
	pool     *pgxpool.Pool
	delay    time.Duration
	announce bool
	ackDelay time.Duration
}

func (s *recordingSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	results := make([]error, len(msgs))
	fail := func(err error) []error {
		for i := range results {
			results[i] = err
		}
		return results
	}
	if s.announce {
		fmt.Println(publishingLine)
	}
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	ids := make([]string, len(msgs))
	aggs := make([]string, len(msgs))
	versions := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i], aggs[i], versions[i] = m.ID.String(), m.AggregateID, m.AggregateVersion
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO storm_deliveries (event_id, aggregate_id, version, pid)
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], array_fill($4::int, ARRAY[$5::int]))`,
		ids, aggs, versions, os.Getpid(), len(msgs))
	if err != nil {
		return fail(outbox.Unavailable(err))
	}
	if s.ackDelay > 0 {
		fmt.Println(recordedLine)
		select {
		case <-time.After(s.ackDelay):
		case <-ctx.Done():
		}
	}
	return results
}

// runChild runs a relay until SIGTERM, then prints its stats.
func runChild() int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childConfigEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(childEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "pool:", err)
		return 2
	}
	defer pool.Close()
	r, err := relay.New(pool, &recordingSink{pool: pool, delay: cfg.PublishDelay, announce: cfg.Announce, ackDelay: cfg.AckDelay}, &relay.Config{
		Mode: cfg.Mode, LeaseTTL: cfg.LeaseTTL, BatchSize: cfg.BatchSize, MaxPerAggregate: cfg.MaxPerAggregate,
		PollInterval: 20 * time.Millisecond, RetryBaseDelay: 20 * time.Millisecond, RetryMaxDelay: 200 * time.Millisecond,
		BreakerInitialDelay: 100 * time.Millisecond, BreakerMaxDelay: 500 * time.Millisecond, ShutdownTimeout: 5 * time.Second, SlowPublish: cfg.SlowPublish,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 2
	}
	fmt.Println(readyPrefix + r.Owner())
	err = r.Run(ctx)
	b, _ := json.Marshal(r.Stats())
	fmt.Println(statsPrefix + string(b))
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

// child is a running relay process.
type child struct {
	cmd        *exec.Cmd
	owner      string
	done       chan struct{}
	publishing chan struct{} // receives (without blocking the child) when a publish starts
	recorded   chan struct{} // receives when the sink has recorded a call's deliveries (AckDelay)
	mu         sync.Mutex
	stats      *relay.Stats
}

func startChild(t *testing.T, dsn string, cfg childConfig) *child {
	t.Helper()
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dsn, childConfigEnv+"="+string(b))
	cmd.Stderr = &prefixWriter{t: t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{}), publishing: make(chan struct{}, 1), recorded: make(chan struct{}, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == publishingLine:
				select {
				case c.publishing <- struct{}{}:
				default:
				}
			case line == recordedLine:
				select {
				case c.recorded <- struct{}{}:
				default:
				}
			case strings.HasPrefix(line, readyPrefix):
				ready <- strings.TrimPrefix(line, readyPrefix)
			case strings.HasPrefix(line, statsPrefix):
				var st relay.Stats
				if json.Unmarshal([]byte(strings.TrimPrefix(line, statsPrefix)), &st) == nil {
					c.mu.Lock()
					c.stats = &st
					c.mu.Unlock()
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(c.done)
	}()
	select {
	case c.owner = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("child relay did not start")
	}
	t.Cleanup(func() { c.signal(syscall.SIGKILL); <-c.done })
	return c
}

func (c *child) signal(sig syscall.Signal) { _ = c.cmd.Process.Signal(sig) }

// stop sends SIGTERM and waits for the child's stats.
func (c *child) stop(t *testing.T) relay.Stats {
	t.Helper()
	c.signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("child relay did not stop within 30s of SIGTERM")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stats == nil {
		t.Fatalf("child relay %d printed no stats (exit %v)", c.cmd.Process.Pid, c.cmd.ProcessState)
	}
	return *c.stats
}

func (c *child) kill() {
	c.signal(syscall.SIGKILL)
	<-c.done
}

type prefixWriter struct{ t *testing.T }

func (w *prefixWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" && !strings.Contains(line, "level=WARN") {
			w.t.Log("child: " + line)
		}
	}
	return len(p), nil
}

// stormCheck is the checker of the kill-storm harness, over storm_deliveries.
type stormCheck struct {
	events, distinctDelivered, deliveries, lost, phantom, unpublished int
}

func checkStorm(t *testing.T, pool *pgxpool.Pool, ordered bool) stormCheck {
	t.Helper()
	ctx := context.Background()
	var c stormCheck
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM outbox.events),
		(SELECT count(DISTINCT event_id) FROM storm_deliveries),
		(SELECT count(*) FROM storm_deliveries),
		(SELECT count(*) FROM outbox.events e WHERE NOT EXISTS (SELECT 1 FROM storm_deliveries d WHERE d.event_id = e.id)),
		(SELECT count(*) FROM storm_deliveries d WHERE NOT EXISTS (SELECT 1 FROM outbox.events e WHERE e.id = d.event_id)),
		(SELECT count(*) FROM outbox.events WHERE published_at IS NULL)`).
		Scan(&c.events, &c.distinctDelivered, &c.deliveries, &c.lost, &c.phantom, &c.unpublished)
	if err != nil {
		t.Fatal(err)
	}
	if !ordered {
		return c
	}
	// First deliveries per aggregate, in delivery order, must have increasing versions
	// with no gap.
	rows, err := pool.Query(ctx, `SELECT aggregate_id, version FROM (
		SELECT DISTINCT ON (event_id) event_id, aggregate_id, version, n FROM storm_deliveries ORDER BY event_id, n) f
		ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	for rows.Next() {
		var agg string
		var v int64
		if err := rows.Scan(&agg, &v); err != nil {
			t.Fatal(err)
		}
		if v != last[agg]+1 {
			t.Errorf("aggregate %s: first delivery of version %d after version %d", agg, v, last[agg])
		}
		last[agg] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
