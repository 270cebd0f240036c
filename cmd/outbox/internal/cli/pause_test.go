package cli_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/sink/sinktest"
)

// TestPauseResumeAcrossTwoRelayProcesses: `outbox pause --aggregate-type` holds that type
// in both running `outbox relay` processes while the other type flows; status shows the
// pause; `outbox resume` releases it at once (the relays listen and poll only every
// minute), and every event is written exactly once over the two sinks.
func TestPauseResumeAcrossTwoRelayProcesses(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	dir := t.TempDir()
	var files []string
	for i := range 2 {
		out := filepath.Join(dir, "events"+string(rune('a'+i))+".jsonl")
		files = append(files, out)
		startDaemon(t, []string{
			"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=jsonl", "OUTBOX_SINK_JSONL_PATH=" + out,
			"OUTBOX_HTTP_LISTEN=", "OUTBOX_RELAY_FALLBACK_POLL_INTERVAL=1m", "OUTBOX_RELAY_POLL_INTERVAL=1m",
		})
	}
	env := []string{"OUTBOX_DATABASE_URL=" + dsn}
	sinktest.WaitFor(t, 30*time.Second, "both relays to hold leases", func() bool {
		return scalar[int64](t, pool, `SELECT count(DISTINCT owner) FROM outbox.leases WHERE expires_at > now()`) == 2
	})
	if r := run(t, env, "pause", "--aggregate-type", "payment", "--reason", "PSP maintenance", "--actor", "ops"); r.code != 0 || !strings.Contains(r.stdout, `paused aggregate type "payment"`) {
		t.Fatalf("outbox pause: %s", r)
	}
	if r := run(t, env, "pause", "--aggregate-type", "payment", "--reason", "again"); r.code != 0 || !strings.Contains(r.stdout, "already paused") || !strings.Contains(r.stdout, "by ops: PSP maintenance") {
		t.Fatalf("outbox pause of a paused type: %s", r)
	}
	insert(t, pool, "order.created", "order", 200, 4, 0)
	insert(t, pool, "payment.captured", "payment", 200, 4, 0)
	if _, err := pool.Exec(t.Context(), `SELECT pg_notify('outbox_wakeup_outbox', '')`); err != nil { // raw INSERTs: no Notifier
		t.Fatal(err)
	}
	written := func() []uuid.UUID { return append(readIDs(t, files[0]), readIDs(t, files[1])...) }
	sinktest.WaitFor(t, 30*time.Second, "the orders published", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_type = 'order' AND published_at IS NULL`) == 0
	})
	time.Sleep(time.Second) // what a relay would publish of the paused type, it would by now
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_type = 'payment' AND published_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d payments published while their type was paused", n)
	}
	if n := len(written()); n != 200 {
		t.Fatalf("the sinks hold %d events, want the 200 orders", n)
	}

	r := run(t, env, "status", "--json")
	var st struct {
		Pauses []struct {
			Scope struct {
				Kind          string
				AggregateType string `json:"aggregate_type"`
			}
			PausedBy string `json:"paused_by"`
			Reason   string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: %v\n%s", err, r)
	}
	if len(st.Pauses) != 1 || st.Pauses[0].Scope.Kind != "aggregate_type" || st.Pauses[0].Scope.AggregateType != "payment" ||
		st.Pauses[0].PausedBy != "ops" || st.Pauses[0].Reason != "PSP maintenance" {
		t.Fatalf("status --json pauses: %+v", st.Pauses)
	}
	if r := run(t, env, "status"); !strings.Contains(r.stdout, `PAUSED aggregate type "payment" since `) {
		t.Fatalf("status does not show the pause:\n%s", r)
	}

	if r := run(t, env, "resume", "--aggregate-type", "payment", "--reason", "PSP back"); r.code != 0 || !strings.Contains(r.stdout, `resumed aggregate type "payment"`) {
		t.Fatalf("outbox resume: %s", r)
	}
	sinktest.WaitFor(t, 20*time.Second, "the payments published after the resume (a wake-up, not a poll)", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
	sinktest.WaitFor(t, 10*time.Second, "the sinks to hold all 400", func() bool { return len(written()) >= 400 })
	seen := map[uuid.UUID]int{}
	for _, id := range written() {
		seen[id]++
		if seen[id] > 1 {
			t.Fatalf("event %s written twice", id)
		}
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.pauses WHERE resumed_by IS NOT NULL AND resume_reason = 'PSP back'`); n != 1 {
		t.Fatalf("the resume is not recorded: %d rows", n)
	}
}

// The pause and resume commands refuse bad flags by name, before acting.
func TestPauseFlags(t *testing.T) {
	t.Parallel()
	dsn, _ := database(t)
	env := []string{"OUTBOX_DATABASE_URL=" + dsn}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"pause", "--reason", "r"}, 2, "name one scope: --all, --partition N or --aggregate-type TYPE"},
		{[]string{"pause", "--all", "--aggregate-type", "order", "--reason", "r"}, 2, "name one scope"},
		{[]string{"pause", "--all"}, 2, "--reason is required"},
		{[]string{"pause", "--partition", "-1", "--reason", "r"}, 2, "--partition must not be negative"},
		{[]string{"pause", "--partition", "16", "--reason", "r"}, 2, "--partition 16: no such relay partition: the schema's relays have 16 (0-15)"},
		{[]string{"resume", "--all", "--reason", "r"}, 1, "resume all: not paused"},
	} {
		r := run(t, env, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("outbox %s: want exit %d and %q\n%s", strings.Join(tc.args, " "), tc.code, tc.want, r)
		}
	}
}

// TestReadyzIgnoresAPause: a paused backlog is held on purpose, no stall: /readyz stays
// 200 well past health.stall_after while nothing is published.
func TestReadyzIgnoresAPause(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	env := []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "out.jsonl"),
		"OUTBOX_HTTP_LISTEN=127.0.0.1:0", "OUTBOX_METRICS_INTERVAL=50ms", "OUTBOX_HEALTH_STALL_AFTER=1s",
		"OUTBOX_RELAY_POLL_INTERVAL=50ms", "OUTBOX_RELAY_FALLBACK_POLL_INTERVAL=50ms",
	}
	p := startInProcess(t, env)
	if r := run(t, env, "pause", "--all", "--reason", "deploy rollback"); r.code != 0 {
		t.Fatalf("outbox pause: %s", r)
	}
	insert(t, pool, "order.created", "order", 10, 1, 0)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if code, body := p.get(t, "/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz with everything paused: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d events published while everything was paused", n)
	}
	if r := run(t, env, "resume", "--all", "--reason", "rolled back"); r.code != 0 {
		t.Fatalf("outbox resume: %s", r)
	}
	sinktest.WaitFor(t, 10*time.Second, "the backlog to drain after the resume", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
}
