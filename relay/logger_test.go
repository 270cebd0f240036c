package relay_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDefaultLoggerWarns: a relay configured without a Logger is not silent — its
// warnings (here: the sink is down) reach slog.Default(), with relay_id; its Info lines
// do not. Not parallel: it replaces the process's default logger.
func TestDefaultLoggerWarns(t *testing.T) {
	var buf lockedBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })

	pool := pgtest.Pool(t)
	enqueue(t, pool, []string{"a", "b", "c", "d"}, 1)
	sink := &memsink.Sink{}
	sink.SetDown(true)
	r, err := relay.New(pool, sink, &relay.Config{Wakeup: relay.WakeupPoll, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(buf.String(), "sink down") {
		select {
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("no warning reached slog.Default() while the sink was down; it got:\n%s", buf.String())
		case <-tick.C:
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "relay_id="+r.Owner()) {
		t.Errorf("the warning lacks its level or relay_id:\n%s", out)
	}
	if strings.Contains(out, "level=INFO") {
		t.Errorf("Info lines reached the default logger (only Warn and above should):\n%s", out)
	}
}

// A lease round that runs out of its own time is logged: with the leases table locked by
// someone else (a long migration, a DBA's LOCK), the heartbeat waits past its round and
// the relay holds no lease. The round's own deadline was taken for the relay stopping,
// and nothing was said.
func TestLeaseRoundTimeoutIsLogged(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	lock, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.Background()) }()
	if _, err := lock.Exec(t.Context(), "LOCK TABLE outbox.relay_members IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var buf lockedBuffer
	cfg := fastConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start(t, newRelay(t, pool, &memsink.Sink{}, cfg))
	waitUntil(t, 10*time.Second, "a warning about the heartbeat", func() bool { return strings.Contains(buf.String(), "relay heartbeat") })
}
