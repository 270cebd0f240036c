package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// demoRun runs `outbox demo` in-process with env and args, within timeout.
func demoRun(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli.Main(ctx, append([]string{"demo"}, args...), cli.IO{In: strings.NewReader(""), Out: &out, Err: &errOut, Env: env})
	return result{code, out.String(), errOut.String()}
}

// demoTable parses the reconciliation table of out: its rows, label → value, between
// the "reconciliation (from the database)" line and the "reconciliation OK|FAILED"
// line, and the verdict.
func demoTable(t *testing.T, out string) (map[string]float64, string) {
	t.Helper()
	_, table, ok := strings.Cut(out, "reconciliation (from the database)\n")
	if !ok {
		t.Fatalf("no reconciliation table in the output:\n%s", out)
	}
	rows := map[string]float64{}
	row := regexp.MustCompile(`^  (\S.*?)\s{2,}(-?[0-9.]+)$`)
	for line := range strings.Lines(table) {
		line = strings.TrimSuffix(line, "\n")
		if v, ok := strings.CutPrefix(line, "reconciliation "); ok {
			return rows, v
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("a row of the reconciliation table does not parse: %q", line)
		}
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		rows[m[1]] = n
	}
	t.Fatalf("the reconciliation table has no verdict line:\n%s", table)
	return nil, ""
}

// TestDemoWithFaults runs the demo for 8 s on its own throwaway PostgreSQL (no
// DATABASE_URL) with both faults, and checks its reconciliation: every committed order
// published, consumed and applied once; the relay killed once and the broker taken
// away once; nothing lost, no double effect.
func TestDemoWithFaults(t *testing.T) {
	r := demoRun(t, 3*time.Minute, nil, "--duration", "8s", "--rate", "60", "--faults", "relay-kill,broker-outage", "--outage", "2s")
	if r.code != cli.ExitOK {
		t.Fatalf("the demo failed:\n%s", r)
	}
	rows, verdict := demoTable(t, r.stdout)
	t.Logf("reconciliation: %v", rows)
	if verdict != "OK" {
		t.Errorf("verdict %q, want OK", verdict)
	}
	for _, k := range []string{"committed", "published", "consumed", "effects applied", "duplicates skipped", "lost", "double effects", "sink deliveries", "republished", "breaker opens", "relay kills", "broker outages", "p99 commit→consume ms"} {
		if _, ok := rows[k]; !ok {
			t.Errorf("the table has no %q row", k)
		}
	}
	// The latency has samples: the producer's commit clock saw the orders' COMMITs.
	if rows["p99 commit→consume ms"] <= 0 {
		t.Errorf("p99 commit→consume %v ms: no latency was measured", rows["p99 commit→consume ms"])
	}
	// 8 s at 60/s: most of the 480 orders, whatever the faults cost the producer.
	if rows["committed"] < 240 {
		t.Errorf("only %v orders committed in 8 s at 60/s", rows["committed"])
	}
	for _, k := range []string{"published", "consumed", "effects applied"} {
		if rows[k] != rows["committed"] {
			t.Errorf("%s %v, want committed %v", k, rows[k], rows["committed"])
		}
	}
	if rows["lost"] != 0 || rows["double effects"] != 0 {
		t.Errorf("lost %v, double effects %v: want 0 and 0", rows["lost"], rows["double effects"])
	}
	// At least once: the killed relay died right after a delivery, before marking it;
	// its successor delivered those events again (the stream's duplicate window or the
	// inbox dropped the repeats: no double effect above).
	if rows["republished"] < 1 || rows["sink deliveries"] != rows["published"]+rows["republished"] || rows["duplicates skipped"] < 0 {
		t.Errorf("republished %v, sink deliveries %v, duplicates skipped %v: want the killed relay's deliveries made again",
			rows["republished"], rows["sink deliveries"], rows["duplicates skipped"])
	}
	if rows["relay kills"] != 1 || rows["broker outages"] != 1 {
		t.Errorf("relay kills %v, broker outages %v: want 1 and 1", rows["relay kills"], rows["broker outages"])
	}
	if !strings.Contains(r.stdout, "FAULT relay killed") || !strings.Contains(r.stdout, "FAULT broker outage") || !strings.Contains(r.stdout, "broker DOWN") {
		t.Errorf("the progress does not show the faults:\n%s", r.stdout)
	}
	if n := len(regexp.MustCompile(`(?m)^\[\s*\d+s\] written `).FindAllString(r.stdout, -1)); n < 6 {
		t.Errorf("%d progress lines in 8 s, want one a second:\n%s", n, r.stdout)
	}
}

// TestDemoJSONOnDatabaseURL runs the demo briefly on the database of DATABASE_URL,
// without faults, and reads its --json summary: stdout is the JSON alone.
func TestDemoJSONOnDatabaseURL(t *testing.T) {
	dsn := pgtest.ConnString(t, nil)
	r := demoRun(t, 2*time.Minute, []string{"DATABASE_URL=" + dsn}, "--duration", "2s", "--rate", "50", "--faults", "none", "--json")
	if r.code != cli.ExitOK {
		t.Fatalf("the demo failed:\n%s", r)
	}
	var s cli.DemoSummary
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("stdout is not the JSON summary: %v\n%s", err, r)
	}
	if s.Committed < 50 || s.Published != s.Committed || s.Consumed != s.Committed || s.EffectsApplied != s.Committed ||
		s.Lost != 0 || s.DoubleEffects != 0 || s.RelayKills != 0 || s.BrokerOutages != 0 || s.Interrupted {
		t.Errorf("summary %+v", s)
	}
	if strings.Contains(r.stderr, "throwaway") || !strings.Contains(r.stderr, "DATABASE_URL") {
		t.Errorf("the demo did not use DATABASE_URL:\n%s", r.stderr)
	}
}

// TestDemoUsage: a bad flag value is a usage error naming the flag, before anything starts.
func TestDemoUsage(t *testing.T) {
	for _, args := range [][]string{{"--faults", "disk-full"}, {"--rate", "0"}, {"--duration", "-1s"}} {
		r := demoRun(t, 10*time.Second, nil, args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("demo %v: want exit 2 naming %s:\n%s", args, args[0], r)
		}
	}
}

// cancelOn is a writer that keeps what it is given and cancels once it has seen mark.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	mark   string
	cancel context.CancelFunc
	// dashboard: the status of the demo's dashboard's /api/status, read at the first
	// progress line (0: not read)
	dashboard int
}

var dashboardURL = regexp.MustCompile(`dashboard \(read-only\): (http://\S+)`)

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := dashboardURL.FindStringSubmatch(w.buf.String()); m != nil && w.dashboard == 0 && strings.Contains(w.buf.String(), "s] written") {
		w.dashboard = -1
		if resp, err := http.Get(m[1] + "api/status"); err == nil { //nolint:noctx // a test's one request
			w.dashboard = resp.StatusCode
			_ = resp.Body.Close()
		}
	}
	if strings.Contains(w.buf.String(), w.mark) {
		w.cancel()
	}
	return len(p), nil
}

func (w *cancelOn) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestDemoInterrupted: Ctrl-C (the context cancelled) mid-run stops the demo at once
// with exit 0 and a table marked interrupted, and removes the PostgreSQL cluster and
// the NATS store it started (its goroutines are checked by TestMain).
func TestDemoInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out := &cancelOn{mark: "[   2s] written", cancel: cancel}
	var errOut bytes.Buffer
	start := time.Now()
	code := cli.Main(ctx, []string{"demo", "--duration", "1m", "--rate", "50"}, cli.IO{In: strings.NewReader(""), Out: out, Err: &errOut})
	r := result{code, out.String(), errOut.String()}
	if code != cli.ExitOK {
		t.Fatalf("interrupted demo: %s", r)
	}
	if el := time.Since(start); el > 40*time.Second {
		t.Errorf("the interrupted demo took %s to stop", el)
	}
	if !strings.Contains(r.stdout, "interrupted: stopped before draining") {
		t.Errorf("no interruption note:\n%s", r)
	}
	if out.dashboard != http.StatusOK {
		t.Errorf("the demo's dashboard answered /api/status with %d while it ran, want 200", out.dashboard)
	}
	rows, verdict := demoTable(t, r.stdout)
	if verdict != "INTERRUPTED (not drained)" {
		t.Errorf("verdict %q after the interruption", verdict)
	}
	if rows["committed"] < 1 {
		t.Errorf("nothing committed before the interruption:\n%s", r)
	}
	for _, re := range []string{`data in (\S+), removed at exit`, `store in (\S+), removed at exit`} {
		m := regexp.MustCompile(re).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("the output does not name the directory (%s):\n%s", re, r)
		}
		if _, err := os.Stat(m[1]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left behind after the interruption (%v)", m[1], err)
		}
	}
}
