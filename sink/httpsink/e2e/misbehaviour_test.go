package e2e_test

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/httpsink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// class is how a result is to be classified.
type class int

const (
	success class = iota
	transient
	permanent
	unavailable
)

func (c class) String() string {
	return [...]string{"success", "transient", "permanent", "unavailable"}[c]
}

func classOf(err error) class {
	switch {
	case err == nil:
		return success
	case outbox.IsPermanent(err):
		return permanent
	case outbox.IsUnavailable(err):
		return unavailable
	}
	return transient
}

// drip writes s one byte per interval until the client goes away.
func drip(w http.ResponseWriter, r *http.Request, s string, interval time.Duration) {
	flusher := w.(http.Flusher)
	for i := range len(s) {
		if _, err := w.Write([]byte{s[i]}); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-time.After(interval):
		case <-r.Context().Done():
			return
		}
	}
}

// misbehave answers by the request's path, as a misbehaving endpoint would.
func misbehave(redirectTarget string) func(w http.ResponseWriter, r *http.Request, _ request) bool {
	return func(w http.ResponseWriter, r *http.Request, _ request) bool {
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusOK)
		case "/status-500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "/status-429":
			w.Header().Set("Retry-After", "7")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "/status-503-date":
			w.Header().Set("Retry-After", time.Now().Add(30*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/retry-after-huge":
			w.Header().Set("Retry-After", "999999")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/status-410":
			http.Error(w, "gone", http.StatusGone)
		case "/status-400":
			http.Error(w, "bad", http.StatusBadRequest)
		case "/status-301":
			http.Redirect(w, r, redirectTarget, http.StatusMovedPermanently)
		case "/hang":
			<-r.Context().Done()
		case "/drip-headers": // a slow-loris status line and headers, 1 byte per 100 ms
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return false
			}
			defer conn.Close()
			for _, c := range []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") {
				if _, err := buf.Write([]byte{c}); err != nil || buf.Flush() != nil {
					return false
				}
				<-time.After(100 * time.Millisecond)
			}
		case "/drip-body-200":
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			drip(w, r, strings.Repeat("x", 1000), 100*time.Millisecond)
		case "/drip-body-500":
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusInternalServerError)
			drip(w, r, strings.Repeat("x", 1000), 100*time.Millisecond)
		case "/big-200", "/big-500":
			if r.URL.Path == "/big-500" {
				w.WriteHeader(http.StatusInternalServerError)
			}
			_, _ = w.Write([]byte(strings.Repeat("0123456789", 1<<20))) // 10 MiB
		case "/endless-200":
			chunk := []byte(strings.Repeat("y", 64<<10))
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					break
				}
			}
		case "/close":
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}
		return true
	}
}

// TestEndpointMisbehaviour sends one event to each misbehaving path and checks its
// class, its reason, that a Retry-After is passed on (capped), and that no answer
// holds a call longer than RequestTimeout.
func TestEndpointMisbehaviour(t *testing.T) {
	t.Parallel()
	var followed atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	t.Cleanup(target.Close)
	e := newEndpoint(t, misbehave(target.URL+"/moved"))
	const timeout = 600 * time.Millisecond
	sink := newSink(t, e, e.addr(), &httpsink.Config{
		URL: "https://hooks.example.com:PORT/{{.AggregateID}}", RequestTimeout: timeout, MaxRetryAfter: time.Minute,
	})
	for _, c := range []struct {
		path       string
		want       class
		says       string
		retryAfter time.Duration
	}{
		{"ok", success, "", 0},
		{"status-500", transient, `500 Internal Server Error: "boom\n"`, 0},
		{"status-429", transient, "429 Too Many Requests", 7 * time.Second},
		{"status-503-date", transient, "503 Service Unavailable", 30 * time.Second},
		{"retry-after-huge", transient, "503", time.Minute},
		{"status-410", permanent, "410 Gone", 0},
		{"status-400", permanent, "400 Bad Request", 0},
		{"status-301", permanent, fmt.Sprintf("redirect to %q not followed", target.URL+"/moved"), 0},
		{"hang", transient, "no complete answer within RequestTimeout 600ms", 0},
		{"drip-headers", transient, "no complete answer within RequestTimeout", 0},
		{"drip-body-200", success, "", 0},
		{"drip-body-500", transient, "500 Internal Server Error", 0},
		{"big-200", success, "", 0},
		{"endless-200", success, "", 0},
		{"big-500", transient, "500 Internal Server Error", 0},
		{"close", unavailable, "EOF", 0},
	} {
		start := time.Now()
		err := sink.Publish(t.Context(), []outbox.Message{message(c.path)})[0]
		took := time.Since(start)
		if got := classOf(err); got != c.want || c.says != "" && !strings.Contains(fmt.Sprint(err), c.says) {
			t.Errorf("%s: %v (%s), want %s saying %q", c.path, err, got, c.want, c.says)
		}
		if d, ok := outbox.RetryAfterOf(err); ok != (c.retryAfter > 0) || d < c.retryAfter-2*time.Second || d > c.retryAfter {
			t.Errorf("%s: retry after %s (%v), want %s", c.path, d, ok, c.retryAfter)
		}
		if took > timeout+time.Second {
			t.Errorf("%s: Publish took %s, RequestTimeout is %s", c.path, took, timeout)
		}
		if err != nil && len(err.Error()) > 1024 {
			t.Errorf("%s: a reason of %d bytes: the response body was not capped in it", c.path, len(err.Error()))
		}
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the 301 was followed %d times", n)
	}
}

// The endpoint processes the request, then its answer never comes: the sink reports a
// transient failure (it cannot know), and the retry carries the same webhook-id with a
// new timestamp and signature — each verified by the standard-webhooks library.
func TestTimeoutAfterProcessingRetriesWithSameID(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	var lost atomic.Bool // the first attempt's answers are lost (by a flag, not by counting
	lost.Store(true)     // requests: a loaded machine once saw two before the first answer)
	// A lost answer is never written, not even when the request's context ends: a handler
	// that returned then sent the implicit 200, and on a loaded machine 1 run in 300 saw
	// it as the first attempt's answer. Its handler waits until the test ends (this
	// cleanup runs before the server's Close, which waits for the handlers).
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	e.answer = func(w http.ResponseWriter, r *http.Request, _ request) bool {
		if lost.Load() {
			<-never // processed; the answer is lost
			return true
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	sink := newSink(t, e, e.addr(), &httpsink.Config{RequestTimeout: 300 * time.Millisecond})
	m := message("o-1")
	if err := sink.Publish(t.Context(), []outbox.Message{m})[0]; classOf(err) != transient || !strings.Contains(err.Error(), "may have processed it") {
		t.Fatalf("first attempt: %v, want a transient timeout", err)
	}
	first := e.requests(true)[0]
	sinktest.WaitFor(t, 2*time.Second, "the clock's second to turn", func() bool { return fmt.Sprint(time.Now().Unix()) != first.timestamp })
	m.Attempt = 2
	lost.Store(false)
	if err := sink.Publish(t.Context(), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("retry: %v", err)
	}
	all := e.requests(true)
	// the first attempt and the retry (the HTTP client may have resent the first attempt's
	// request on a loaded machine: the same request, the same signature)
	if len(all) < 2 {
		t.Fatalf("%d requests, want 2", len(all))
	}
	firstTry, retry := all[0], all[len(all)-1]
	for _, r := range all {
		if r.id != m.ID.String() {
			t.Errorf("webhook-id %s; want %s on every request", r.id, m.ID)
		}
	}
	if firstTry.timestamp == retry.timestamp || firstTry.signature == retry.signature {
		t.Errorf("the retry reused timestamp %s / signature %s", retry.timestamp, retry.signature)
	}
}

// TLS failures are transient and nothing reaches the endpoint: a certificate from an
// authority the sink does not trust, one for another name, and a plaintext server
// behind an https URL. Plain http is delivered only with AllowHTTP.
func TestTLSErrors(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	var plainHits atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { plainHits.Add(1) }))
	t.Cleanup(plain.Close)
	for _, c := range []struct {
		name string
		cfg  httpsink.Config
		addr string
		says string
	}{
		{"untrusted authority", httpsink.Config{TLS: newTLSConfig(x509.NewCertPool())}, e.addr(), "certificate signed by unknown authority"},
		{"certificate for another name", httpsink.Config{URL: "https://hooks.other.test:PORT/x", AllowedHosts: []string{"hooks.other.test"}}, e.addr(), "certificate is valid for"},
		{"plaintext server", httpsink.Config{}, plain.Listener.Addr().String(), "HTTP response to HTTPS client"},
	} {
		sink := newSink(t, e, c.addr, &c.cfg)
		err := sink.Publish(t.Context(), []outbox.Message{message("o-1")})[0]
		if classOf(err) != transient || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want transient, saying %q", c.name, err, c.says)
		}
	}
	if n := len(e.requests(true)) + int(plainHits.Load()); n != 0 {
		t.Errorf("%d requests reached an endpoint over a failed TLS handshake", n)
	}
	insecure := newSink(t, e, plain.Listener.Addr().String(), &httpsink.Config{URL: "http://hooks.example.com:PORT/x", AllowHTTP: true})
	if err := insecure.Publish(t.Context(), []outbox.Message{message("o-1")})[0]; err != nil || plainHits.Load() != 1 {
		t.Errorf("plain http with AllowHTTP: %v, %d requests", err, plainHits.Load())
	}
}

// A name that does not exist is the event's transient failure; a DNS server that
// fails is an outage.
func TestDNSFailures(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, nil)
	sink := newSink(t, e, e.addr(), &httpsink.Config{URL: "https://{{.AggregateID}}.example.com:PORT/x", AllowedHosts: []string{"*.example.com"}})
	errs := sink.Publish(t.Context(), []outbox.Message{message("missing"), message("flaky"), message("fine")})
	if classOf(errs[0]) != transient || !strings.Contains(errs[0].Error(), "no such host") {
		t.Errorf("NXDOMAIN: %v, want transient", errs[0])
	}
	if classOf(errs[1]) != unavailable {
		t.Errorf("DNS server failure: %v, want unavailable", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("another host: %v", errs[2])
	}
}

// At most MaxConnsPerHost requests are in flight to one host, and that many are:
// aggregates go in parallel.
func TestConnectionsPerHostBounded(t *testing.T) {
	t.Parallel()
	var inFlight, most atomic.Int64
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ request) bool {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-time.After(20 * time.Millisecond) // the endpoint's own latency
		w.WriteHeader(http.StatusOK)
		return true
	})
	sink := newSink(t, e, e.addr(), &httpsink.Config{MaxConnsPerHost: 3})
	var msgs []outbox.Message
	for i := range 48 {
		msgs = append(msgs, message(fmt.Sprintf("o-%d", i%24)))
	}
	for i, err := range sink.Publish(t.Context(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if n := most.Load(); n != 3 {
		t.Fatalf("at most %d requests in flight, want exactly MaxConnsPerHost (3)", n)
	}
}
