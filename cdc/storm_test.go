package cdc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/jsonlsink"
)

// The kill storm's child process: its environment.
const (
	stormDSNEnv  = "OUTBOX_CDC_STORM_DSN"
	stormFileEnv = "OUTBOX_CDC_STORM_FILE"
	stormSlotEnv = "OUTBOX_CDC_STORM_SLOT"
)

// stormChild runs an ordered relay and its Source, publishing to a JSON-lines file
// (5 ms a call), until it is killed or sent SIGTERM. The relay polls every 20 ms, so its
// polling claims race the Source's by-seq ones for the same aggregates.
func stormChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(stormDSNEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	sink, err := jsonlsink.Open(os.Getenv(stormFileEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = sink.Close() }()
	r, err := relay.New(pool, delayed{sink}, &relay.Config{Wakeup: relay.WakeupPoll, PollInterval: 20 * time.Millisecond, LeaseTTL: 2 * time.Second, Logger: testLogger})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	src, err := New(pool, r, &Config{Slot: os.Getenv(stormSlotEnv), StatusInterval: 50 * time.Millisecond, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second, Logger: testLogger})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	_ = r.Run(ctx)
	<-done
	return 0
}

// delayed publishes through its sink after 5 ms a call: a broker's round trip, so that
// the Source's batches and the relay's polling ones overlap.
type delayed struct{ outbox.Sink }

func (d delayed) Publish(ctx context.Context, msgs []outbox.Message) []error {
	select {
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
	}
	return d.Sink.Publish(ctx, msgs)
}

// The relay kill storm in CDC mode: while a producer writes 30 aggregates' events in
// version order, the process running the relay and its Source is SIGKILLed eight times
// at random moments (mid-batch, between publish and mark, between the mark and the
// confirmation) and restarted at once. In the end every event was published, each
// aggregate's first deliveries in version order; what a kill cut short came again
// (duplicates), nothing was lost.
func TestKillStormUnderCDC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	t.Parallel()
	dsn := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, dsn)
	slot := slotName(t, pool)
	dropSlotAtEnd(t, pool, slot)
	file := filepath.Join(t.TempDir(), "published.jsonl")
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), stormDSNEnv+"="+dsn, stormFileEnv+"="+file, stormSlotEnv+"="+slot)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	child := start()
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	waitUntil(t, 30*time.Second, "the child's Source streams", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, slot) == 1
	})

	const aggregates, versions = 30, 40
	written := make(chan struct{})
	go func() {
		defer close(written)
		for v := 1; v <= versions; v++ {
			write(t, pool, ids("k", aggregates), v, 1)
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
		}
	}()
	for range 8 {
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
		_ = child.Process.Signal(syscall.SIGKILL)
		_ = child.Wait()
		child = start()
	}
	<-written
	total := aggregates * versions
	var got []jsonlsink.Record
	waitUntil(t, time.Minute, fmt.Sprintf("all %d events published", total), func() bool {
		got = readRecords(t, file)
		seen := map[string]bool{}
		for _, r := range got {
			seen[r.ID.String()] = true
		}
		return len(seen) == total
	})
	firsts := map[string]bool{}
	last := map[string]int64{}
	for _, r := range got {
		if firsts[r.ID.String()] {
			continue
		}
		firsts[r.ID.String()] = true
		if r.AggregateVersion != last[r.AggregateID]+1 {
			t.Fatalf("aggregate %s: version %d first published after %d", r.AggregateID, r.AggregateVersion, last[r.AggregateID])
		}
		last[r.AggregateID] = r.AggregateVersion
	}
	t.Logf("%d events, %d deliveries (%d duplicates) through 8 kills", total, len(got), len(got)-total)
}

// readRecords reads the JSON-lines file; a line torn by a kill is skipped.
func readRecords(t *testing.T, path string) []jsonlsink.Record {
	t.Helper()
	f, err := os.Open(path) //nolint:gosec // the test's own temp file
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []jsonlsink.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r jsonlsink.Record
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}
