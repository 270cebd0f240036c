package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/sink/sinktest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the outbox command once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "outbox-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "outbox")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/outboxkit/outbox/cmd/outbox").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build the outbox command: %v", buildErr)
	}
	return binPath
}

// daemon is `outbox relay` running as a subprocess.
type daemon struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	err            error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startDaemon(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	d := &daemon{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(binary(t), append([]string{"relay"}, args...)...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.stdout, d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		noSecret(t, d.stdout.String()+d.stderr.String(), canary)
	})
	return d
}

// stop sends SIGTERM and returns how long the process took to exit; it fails t after limit.
func (d *daemon) stop(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(limit):
		t.Fatalf("outbox relay still running %s after SIGTERM\nstderr:\n%s", limit, d.stderr.String())
	}
	if d.err != nil {
		t.Fatalf("outbox relay after SIGTERM: %v (want exit 0)\nstderr:\n%s", d.err, d.stderr.String())
	}
	return time.Since(start)
}

// readIDs returns the ids of a jsonl sink's file, in order.
func readIDs(t *testing.T, path string) []uuid.UUID {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []uuid.UUID
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct{ ID uuid.UUID }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			continue // a line being written
		}
		ids = append(ids, rec.ID)
	}
	return ids
}

func publishedIDs(t *testing.T, pool *pgxpool.Pool) map[uuid.UUID]bool {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id FROM outbox.events WHERE published_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]bool{}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func leasesHeld(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	return scalar[int64](t, pool, `SELECT count(*) FROM outbox.leases WHERE owner IS NOT NULL AND expires_at > now()`)
}

// TestRelaySIGTERMMidBacklog: the built binary, SIGTERM while it drains a backlog →
// exit 0 well within relay.shutdown_timeout, its leases released, and every event it
// marked published was written exactly once, none written unmarked; a second run
// drains the rest, and every event is delivered exactly once overall.
func TestRelaySIGTERMMidBacklog(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	const n = 30000
	insert(t, pool, "order.created", "order", n, 10, time.Minute)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	env := []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=jsonl", "OUTBOX_SINK_JSONL_PATH=" + out,
		"OUTBOX_HTTP_LISTEN=", "OUTBOX_RELAY_BATCH_SIZE=5", "OUTBOX_RELAY_MAX_PER_AGGREGATE=1",
		"OUTBOX_RELAY_SHUTDOWN_TIMEOUT=5s", "OUTBOX_LOG_FORMAT=json",
	}
	d := startDaemon(t, env)
	sinktest.WaitFor(t, time.Minute, "500 events published", func() bool { return len(readIDs(t, out)) >= 500 })
	took := d.stop(t, 5*time.Second+3*time.Second)
	t.Logf("exited %s after SIGTERM", took)

	pending := scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	if pending == 0 {
		t.Fatalf("the backlog drained before SIGTERM: the test needs a larger one")
	}
	if h := leasesHeld(t, pool); h != 0 {
		t.Errorf("%d leases still held after a graceful stop", h)
	}
	written := readIDs(t, out)
	checkSame(t, "after SIGTERM", written, publishedIDs(t, pool))
	if !strings.Contains(d.stderr.String(), `"msg":"relay stopped"`) || !strings.Contains(d.stderr.String(), `"relay_id":`) {
		t.Errorf("the daemon's log lacks its stop line with relay_id:\n%s", d.stderr.String())
	}

	d2 := startDaemon(t, env, "--relay-batch-size", "100", "--relay-max-per-aggregate", "10") // flags win over the environment
	sinktest.WaitFor(t, 2*time.Minute, "every event published", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
	d2.stop(t, 8*time.Second)
	written = readIDs(t, out)
	if len(written) != n {
		t.Errorf("after two runs the sink has %d lines for %d events", len(written), n)
	}
	checkSame(t, "after the second run", written, publishedIDs(t, pool))
}

// checkSame fails t unless written holds each id of published exactly once, and nothing else.
func checkSame(t *testing.T, when string, written []uuid.UUID, published map[uuid.UUID]bool) {
	t.Helper()
	seen := map[uuid.UUID]int{}
	for _, id := range written {
		seen[id]++
	}
	var dup, unmarked, lost int
	for id, c := range seen {
		if c > 1 {
			dup++
		}
		if !published[id] {
			unmarked++
		}
	}
	for id := range published {
		if seen[id] == 0 {
			lost++
		}
	}
	if dup+unmarked+lost > 0 {
		t.Errorf("%s: %d written twice, %d written but not marked published, %d marked published but never written (of %d written, %d published)",
			when, dup, unmarked, lost, len(written), len(published))
	}
}

// TestRelaySIGTERMWithAHungSink: a webhook that never answers holds a batch in flight;
// SIGTERM → the process exits 0 within relay.shutdown_timeout (and a margin), its
// leases released, the events still pending (nothing lost, nothing marked).
func TestRelaySIGTERMWithAHungSink(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	insert(t, pool, "order.created", "order", 20, 1, time.Minute)
	arrived := make(chan struct{}, 100)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	_, addr := webhook(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	secret := "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // 24 bytes, base64
	env := []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=http", "OUTBOX_SINK_HTTP_URL=http://" + addr + "/hook",
		"OUTBOX_SINK_HTTP_ALLOWED_HOSTS=127.0.0.1", "OUTBOX_SINK_HTTP_ALLOW_HTTP=true", "OUTBOX_SINK_HTTP_ALLOW_PRIVATE=127.0.0.1/32",
		"OUTBOX_SINK_HTTP_SECRETS=" + secret, "OUTBOX_SINK_HTTP_REQUEST_TIMEOUT=1m",
		"OUTBOX_HTTP_LISTEN=", "OUTBOX_RELAY_SHUTDOWN_TIMEOUT=2s", "OUTBOX_RELAY_BATCH_TIMEOUT=1m",
	}
	d := startDaemon(t, env)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("no webhook call\nstderr:\n%s", d.stderr.String())
	}
	// SIGHUP is ignored (documented): the process goes on, and SIGTERM still stops it cleanly.
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	took := d.stop(t, 2*time.Second+3*time.Second)
	t.Logf("exited %s after SIGTERM\n%s", took, d.stderr.String())
	if took < 2*time.Second-100*time.Millisecond {
		t.Errorf("exited after %s: before shutdown_timeout (2s) with a publish in flight?", took)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL`); n != 20 {
		t.Errorf("%d of 20 events pending after an abandoned batch", n)
	}
	if h := leasesHeld(t, pool); h != 0 {
		t.Errorf("%d leases still held after the stop", h)
	}
	noSecret(t, d.stdout.String()+d.stderr.String(), secret)
}

// webhook serves h on a local port until t ends; it returns the server and its address.
func webhook(t *testing.T, h http.HandlerFunc) (*http.Server, string) {
	t.Helper()
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: h}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return srv, ln.Addr().String()
}
