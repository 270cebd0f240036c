package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// TestPurge: only events published longer ago than --older-than go; recent published,
// pending and dead events stay; archive mode keeps a slim row.
func TestPurge(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	env := []string{"OUTBOX_DATABASE_URL=" + dsn}
	insert(t, pool, "old.published", "a", 5, 1, 72*time.Hour)
	insert(t, pool, "old.dead", "b", 2, 1, 72*time.Hour)
	insert(t, pool, "old.pending", "c", 2, 1, 72*time.Hour)
	insert(t, pool, "new.published", "d", 3, 1, time.Hour)
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET published_at = created_at + interval '1 second' WHERE event_type LIKE '%.published'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET dead_at = now() WHERE event_type = 'old.dead'`); err != nil {
		t.Fatal(err)
	}
	if r := run(t, env, "purge"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--older-than is required") {
		t.Errorf("purge without --older-than:\n%s", r)
	}
	r := run(t, env, "purge", "--older-than", "48h", "--retention-mode", "keep-then-archive")
	if r.code != 0 || !strings.Contains(r.stdout, "purged 5 published event(s)") {
		t.Fatalf("purge --older-than 48h:\n%s", r)
	}
	left := map[string]int64{}
	rows, err := pool.Query(t.Context(), `SELECT event_type, count(*) FROM outbox.events GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var typ string
		var n int64
		if err := rows.Scan(&typ, &n); err != nil {
			t.Fatal(err)
		}
		left[typ] = n
	}
	if left["old.published"] != 0 || left["old.dead"] != 2 || left["old.pending"] != 2 || left["new.published"] != 3 {
		t.Errorf("after the purge: %v", left)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.events_archive WHERE event_type = 'old.published'`); n != 5 {
		t.Errorf("archive mode: %d slim rows, want 5", n)
	}
}

// TestTail: tail from now shows the events written after it started, in order, and
// stops after --count.
func TestTail(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	insert(t, pool, "before", "x", 3, 1, 0) // written before tail starts: not shown
	var out, errOut syncBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	go func() {
		done <- cli.Main(ctx, []string{"tail", "--count", "4", "--interval", "20ms", "--payload"},
			cli.IO{In: strings.NewReader(""), Out: &out, Err: &errOut, Env: []string{"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_LOG_LEVEL=debug"}})
	}()
	// tail reads its starting seq first; rows written after that are shown. Wait for
	// it to be polling (its connection asks for rows after the start).
	sinktest.WaitFor(t, 30*time.Second, "tail to start polling", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%WHERE seq > $%'`) > 0
	})
	insert(t, pool, "after", "y", 4, 2, 0)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("tail exited %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("tail did not stop after 4 events:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("tail printed %d lines, want 4:\n%s", len(lines), out.String())
	}
	var prev int64
	for _, l := range lines {
		var tl cli.TailLine
		if err := json.Unmarshal([]byte(l), &tl); err != nil {
			t.Fatalf("tail line %q: %v", l, err)
		}
		if tl.EventType != "after" || tl.State != "pending" || tl.Seq <= prev || !strings.Contains(string(tl.Payload), `"n"`) {
			t.Errorf("tail line %+v", tl)
		}
		prev = tl.Seq
	}
	noSecret(t, out.String()+errOut.String(), canary)
}
