package relay_test

// How the relay classifies what a sink reports, tried with real failures: an HTTP
// client's own timeout, a publish that hangs until the relay gives up on it, dial
// refusals, connections the far end closes or resets, and permanent refusals across
// many aggregates.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// sequentialSink publishes one message after another, as the Sink contract allows, by
// calling send; after a failure the later messages of that aggregate are not sent.
type sequentialSink struct {
	send      func(ctx context.Context, m outbox.Message) error
	delivered atomic.Int64
}

func (s *sequentialSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	failed := map[string]bool{}
	for i, m := range msgs {
		key := m.AggregateType + "/" + m.AggregateID
		if failed[key] {
			errs[i] = outbox.ErrNotSent
			continue
		}
		if err := s.send(ctx, m); err != nil {
			errs[i] = err
			failed[key] = true
			continue
		}
		s.delivered.Add(1)
	}
	return errs
}

// enqueueSlowFirst writes one event of aggregate "slow" and then perAgg events of each
// of n other aggregates: the slow event is the oldest head.
func enqueueSlowFirst(t *testing.T, pool *pgxpool.Pool, n, perAgg int) {
	t.Helper()
	enqueue(t, pool, []string{"slow"}, 1)
	enqueue(t, pool, aggregates("fast", n), perAgg)
}

type eventState struct {
	attempts  int
	dead      bool
	published bool
	lastError string
}

func stateOf(t *testing.T, pool *pgxpool.Pool, aggregateID string) eventState {
	t.Helper()
	var s eventState
	err := pool.QueryRow(context.Background(), `SELECT attempts, dead_at IS NOT NULL, published_at IS NOT NULL, coalesce(last_error, '')
		FROM outbox.events WHERE aggregate_id = $1 ORDER BY seq LIMIT 1`, aggregateID).Scan(&s.attempts, &s.dead, &s.published, &s.lastError)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A message whose publish times out while the relay's own batch budget is alive is that
// message's transient failure: an attempt counted, backoff, dead when the budget is
// spent — whether the sink's client gave up (an HTTP client's Timeout), or the publish
// hung until the relay's BatchTimeout cut it off. A sink that publishes one message
// after another must not let the hung message hold the other aggregates beyond one
// batch's time, and a timeout alone in its batch must not open the breaker for everyone.
func TestPublishTimeoutIsThatMessagesFailure(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/slow") {
			select { // hang until the client gives up
			case <-req.Context().Done():
			case <-hang:
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(server.Close)
	t.Cleanup(func() { close(hang) }) // runs first: no handler is left hanging
	post := func(client *http.Client) func(ctx context.Context, m outbox.Message) error {
		return func(ctx context.Context, m outbox.Message) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, server.URL+"/"+m.AggregateID, strings.NewReader(string(m.Payload)))
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode >= 300 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name       string
		client     *http.Client // the sink's
		others     int          // other aggregates, 3 events each
		batchTime  time.Duration
		wantReason string
	}{
		// http.Client.Timeout: the error matches context.DeadlineExceeded.
		{"client-timeout", &http.Client{Timeout: 150 * time.Millisecond}, 20, 10 * time.Second, "Client.Timeout"},
		// The sink has no timeout: the relay's BatchTimeout ends the publish.
		{"hangs-until-batch-timeout", &http.Client{}, 20, 400 * time.Millisecond, "BatchTimeout"},
		// Alone in its batch: still that message's failure, not an outage.
		{"alone", &http.Client{Timeout: 150 * time.Millisecond}, 0, 10 * time.Second, "Client.Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueueSlowFirst(t, pool, tc.others, 3)
			sink := &sequentialSink{send: post(tc.client)}
			cfg := fastConfig()
			cfg.MaxAttempts = 3
			cfg.BatchTimeout = tc.batchTime
			r := newRelay(t, pool, sink, cfg)
			start(t, r)
			if tc.others > 0 {
				// The other aggregates are not held up beyond one batch's time per attempt of
				// the slow one.
				waitSQL(t, pool, 5*time.Second, 3*tc.others, `SELECT count(*) FROM outbox.events WHERE aggregate_id <> 'slow' AND published_at IS NOT NULL`)
			}
			waitSQL(t, pool, 15*time.Second, 1, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'slow' AND dead_at IS NOT NULL`)
			s := stateOf(t, pool, "slow")
			if s.attempts != 3 || !strings.Contains(s.lastError, tc.wantReason) {
				t.Fatalf("slow event: attempts %d, last_error %q; want 3 attempts and a reason naming %s", s.attempts, s.lastError, tc.wantReason)
			}
			if st := r.Stats(); st.BreakerOpens != 0 || st.SinkDownBatches != 0 {
				t.Fatalf("a timeout of one message opened the breaker: %+v", st)
			}
		})
	}
}

// closedPort returns an address on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// brokenServer accepts connections and ends each: closing it after reading the request
// line (the client reads EOF) or resetting it at once (SO_LINGER 0: connection reset by
// peer).
func brokenServer(t *testing.T, reset bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			} else {
				_, _ = bufio.NewReader(c).ReadString('\n')
			}
			_ = c.Close()
		}
	}()
	return l.Addr().String()
}

// roundTrip dials addr, writes a request line and reads the answer: the raw error a
// sink that forgot to wrap it would return.
func roundTrip(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PUB x 1\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 1)
	_, err = c.Read(buf)
	return err
}

// Outage is not poison, whoever forgot to say so: connection errors a sink returns
// unwrapped (dial refused, EOF from a closed connection, a reset) are the sink being
// down, even for a single aggregate: no attempt is counted, nothing goes dead, the
// breaker opens, and the event is published once the broker is back.
func TestUnwrappedConnectionErrorsAreAnOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"dial-refused", closedPort},
		{"closed-eof", func(t *testing.T) string { return brokenServer(t, false) }},
		{"reset", func(t *testing.T) string { return brokenServer(t, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, []string{"only"}, 2)
			addr := tc.addr(t)
			var down atomic.Bool
			down.Store(true)
			var seen atomic.Value
			sink := &sequentialSink{send: func(ctx context.Context, _ outbox.Message) error {
				if !down.Load() {
					return nil
				}
				err := roundTrip(ctx, addr)
				if err == nil {
					err = errors.New("the broken server answered")
				}
				seen.Store(err.Error())
				return err
			}}
			cfg := fastConfig()
			cfg.MaxAttempts = 3
			r := newRelay(t, pool, sink, cfg)
			start(t, r)
			throughout(3*time.Second, func() { // the outage's length
				if s := stateOf(t, pool, "only"); s.attempts != 0 || s.dead {
					t.Fatalf("sink down (%v): attempts %d, dead %v; an outage must count nothing", seen.Load(), s.attempts, s.dead)
				}
			})
			if seen.Load() == nil || r.Stats().BreakerOpens == 0 {
				t.Fatalf("the sink was never tried (%v) or the breaker never opened (%+v)", seen.Load(), r.Stats())
			}
			t.Logf("error seen: %v", seen.Load())
			down.Store(false)
			waitSQL(t, pool, 10*time.Second, 2, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
		})
	}
}

// An explicit Permanent is never an outage, however many aggregates it spans: 250
// events refused permanently go dead at once (one attempt each); the breaker stays shut.
func TestPermanentRefusalsAreNeverAnOutage(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("p", 250), 1)
			sink := &memsink.Sink{FailFunc: func(outbox.Message) error { return outbox.Permanent(errors.New("schema registry refused the payload")) }}
			cfg := fastConfig()
			cfg.Mode = mode
			r := newRelay(t, pool, sink, cfg)
			start(t, r)
			waitSQL(t, pool, 5*time.Second, 250, `SELECT count(*) FROM outbox.events WHERE dead_at IS NOT NULL AND attempts = 1`)
			if st := r.Stats(); st.BreakerOpens != 0 || st.SinkDownBatches != 0 {
				t.Fatalf("permanent refusals were taken for an outage: %+v", st)
			}
		})
	}
}

// A broker that asks for a pause (outbox.RetryAfter: an HTTP 429 with Retry-After) gets
// it: the next attempt waits the longer of that and the relay's own backoff (20 ms here).
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, []string{"limited"}, 1)
	var attempts []time.Time
	var mu sync.Mutex
	sink := &memsink.Sink{FailFunc: func(outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, time.Now())
		if len(attempts) == 1 {
			return outbox.RetryAfter(errors.New("429 too many requests"), 700*time.Millisecond)
		}
		return nil
	}}
	start(t, newRelay(t, pool, sink, fastConfig()))
	waitFor(t, sink, 5*time.Second, "the event", func(m []outbox.Message) bool { return len(m) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if gap := attempts[1].Sub(attempts[0]); gap < 650*time.Millisecond {
		t.Fatalf("retried %s after a Retry-After of 700ms", gap)
	}
}
