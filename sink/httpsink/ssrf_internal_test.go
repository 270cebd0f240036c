package httpsink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outbox"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// loopbackOnly is the guard's connect for these tests: it connects to loopback
// addresses only, so that a guard that let a refused address through fails the test
// instead of sending traffic off the machine.
func loopbackOnly(t *testing.T) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			t.Errorf("the guard let a connection to %s through", address)
			return nil, errors.New("test: refusing a connection off the loopback")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
}

// resolver answers every lookup with the next of answers (the last one repeats),
// counting the lookups.
type resolver struct {
	mu      sync.Mutex
	answers [][]string
	lookups int
}

func (r *resolver) resolve(_ context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	answer := r.answers[min(r.lookups, len(r.answers)-1)]
	r.lookups++
	var addrs []netip.Addr
	for _, a := range answer {
		addrs = append(addrs, netip.MustParseAddr(a))
	}
	return addrs, nil
}

// ssrfServer is an endpoint on 127.0.0.1 that counts the requests to each path and
// closes every connection after its answer, so each request dials again.
func ssrfServer(t *testing.T, redirect string) (*httptest.Server, *sync.Map) {
	hits := &sync.Map{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := hits.LoadOrStore(r.URL.Path, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		w.Header().Set("Connection", "close")
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, redirect, http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, hits
}

func hitCount(hits *sync.Map, path string) int64 {
	n, ok := hits.Load(path)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// ssrfSink posts to https://<aggregate id>:<the server's port><path>.
func ssrfSink(t *testing.T, srv *httptest.Server, path string, allow []netip.Prefix, r *resolver) *Sink {
	t.Helper()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	s, err := New(&Config{
		URL:          fmt.Sprintf("https://{{.AggregateID}}:%d%s", port, path),
		AllowedHosts: []string{"*.example.com", "127.0.0.1", "::1"}, Secrets: []string{testSecret},
		AllowPrivate: allow, Resolve: r.resolve,
		TLS: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.guard.connect = loopbackOnly(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func to(host string) outbox.Message {
	return outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: host, EventType: "order.paid", SchemaVersion: 1, Attempt: 1}
}

var loopbackAllowed = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// A host whose resolved address the guard refuses fails permanently, naming the
// address and its range, and the endpoint is never reached; the same endpoint,
// allowed, is reached — so the refusal is the guard's.
func TestSSRFResolvedAddressesRefused(t *testing.T) {
	t.Parallel()
	srv, hits := ssrfServer(t, "")
	for _, c := range []struct {
		name, host string
		answer     []string
		want       string
	}{
		{"a name resolving to 127.0.0.1", "evil.example.com", []string{"127.0.0.1"}, "127.0.0.1 (loopback)"},
		{"the metadata service", "metadata.example.com", []string{"169.254.169.254"}, "169.254.169.254 (link-local)"},
		{"IPv6 loopback", "six.example.com", []string{"::1"}, "::1 (loopback)"},
		{"IPv4-mapped IPv6 loopback", "mapped.example.com", []string{"::ffff:127.0.0.1"}, "127.0.0.1 (loopback)"},
		{"10/8", "ten.example.com", []string{"10.0.0.5"}, "10.0.0.5 (private)"},
		{"fd00::/8", "ula.example.com", []string{"fd00::1"}, "fd00::1 (private)"},
		{"the IPv6 literal [::1]", "[::1]", nil, "::1 (loopback)"},
		{"the IPv4 literal 127.0.0.1", "127.0.0.1", nil, "127.0.0.1 (loopback)"},
	} {
		r := &resolver{answers: [][]string{c.answer}}
		s := ssrfSink(t, srv, "/hook", nil, r)
		err := s.Publish(t.Context(), []outbox.Message{to(c.host)})[0]
		var blocked *BlockedError
		if !outbox.IsPermanent(err) || !errors.As(err, &blocked) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a permanent BlockedError naming %s", c.name, err, c.want)
		}
	}
	if n := hitCount(hits, "/hook"); n != 0 {
		t.Fatalf("the endpoint was reached %d times", n)
	}
	s := ssrfSink(t, srv, "/hook", loopbackAllowed, &resolver{answers: [][]string{{"127.0.0.1"}}})
	if err := s.Publish(t.Context(), []outbox.Message{to("ok.example.com")})[0]; err != nil {
		t.Fatalf("with 127.0.0.1 allowed: %v", err)
	}
	if n := hitCount(hits, "/hook"); n != 1 {
		t.Fatalf("with 127.0.0.1 allowed the endpoint was reached %d times, want 1", n)
	}
}

// DNS rebinding: the name resolves to an allowed address, then to the metadata
// service. The check runs on every connection, so the second is refused.
func TestSSRFRebindingRefusedAtTheNextConnection(t *testing.T) {
	t.Parallel()
	srv, hits := ssrfServer(t, "")
	r := &resolver{answers: [][]string{{"127.0.0.1"}, {"169.254.169.254"}}}
	s := ssrfSink(t, srv, "/hook", loopbackAllowed, r)
	if err := s.Publish(t.Context(), []outbox.Message{to("rebind.example.com")})[0]; err != nil {
		t.Fatalf("first delivery, the name on an allowed address: %v", err)
	}
	err := s.Publish(t.Context(), []outbox.Message{to("rebind.example.com")})[0]
	if !outbox.IsPermanent(err) || !strings.Contains(err.Error(), "169.254.169.254 (link-local)") {
		t.Fatalf("after the name rebound to the metadata service: %v, want a permanent refusal", err)
	}
	if n := hitCount(hits, "/hook"); n != 1 || r.lookups != 2 {
		t.Fatalf("endpoint reached %d times after %d lookups, want 1 after 2", n, r.lookups)
	}
}

// A name with a refused and an allowed address is connected to on the allowed one
// only (loopbackOnly fails the test otherwise).
func TestSSRFOnlyPermittedAddressesDialled(t *testing.T) {
	t.Parallel()
	srv, hits := ssrfServer(t, "")
	s := ssrfSink(t, srv, "/hook", loopbackAllowed, &resolver{answers: [][]string{{"169.254.169.254", "10.1.1.1", "127.0.0.1"}}})
	if err := s.Publish(t.Context(), []outbox.Message{to("mixed.example.com")})[0]; err != nil {
		t.Fatal(err)
	}
	if n := hitCount(hits, "/hook"); n != 1 {
		t.Fatalf("endpoint reached %d times, want 1", n)
	}
}

// A redirect, to the metadata service or to another path of an allowed host, is not
// followed: the event fails permanently with the Location in its reason.
func TestSSRFRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"http://169.254.169.254/latest/meta-data/", "/internal"} {
		srv, hits := ssrfServer(t, target)
		s := ssrfSink(t, srv, "/redirect", loopbackAllowed, &resolver{answers: [][]string{{"127.0.0.1"}}})
		err := s.Publish(t.Context(), []outbox.Message{to("hooks.example.com")})[0]
		if !outbox.IsPermanent(err) || !strings.Contains(err.Error(), "302") || !strings.Contains(err.Error(), fmt.Sprintf("redirect to %q not followed", target)) {
			t.Errorf("302 to %s: %v, want permanent, with the Location", target, err)
		}
		if n := hitCount(hits, "/internal"); n != 0 {
			t.Errorf("the redirect to %s was followed", target)
		}
	}
}
