package e2e_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/httpsink"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// The sink signs with both secrets, as during a rotation; the endpoints verify with
// the old one.
const (
	secretOld = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretNew = "whsec_bmV3LXNlY3JldC0yNC1ieXRlcy1sb25nISE="
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// request is one request an endpoint received and verified.
type request struct {
	id, timestamp, signature string
	at                       time.Time
	msg                      outbox.Message
}

// endpoint is a real HTTPS server (httptest's certificate, for example.com and
// *.example.com) that verifies every request with the standard-webhooks library. Its
// answer decides the response and whether the request counts as received; the
// default answers 422 to the messages its refusals name, 204 to the others.
type endpoint struct {
	srv    *httptest.Server
	wh     *standardwebhooks.Webhook
	answer func(w http.ResponseWriter, r *http.Request, req request) bool

	refusals sinktest.Refusals
	mu       sync.Mutex
	all      []request // every verified request
	got      []request // those the answer accepted
	problems []string
}

func newEndpoint(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, req request) bool) *endpoint {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secretOld)
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{wh: wh, answer: answer}
	if e.answer == nil {
		e.answer = func(w http.ResponseWriter, _ *http.Request, req request) bool {
			if e.refusals.Refused(req.msg) {
				http.Error(w, "refused by the test", http.StatusUnprocessableEntity)
				return false
			}
			w.WriteHeader(http.StatusNoContent)
			return true
		}
	}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, p := range e.problems {
			t.Error(p)
		}
	})
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the TLS failures tests cause on purpose
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		e.problem("read a request body: %v", err)
		return
	}
	if err := e.wh.Verify(body, r.Header); err != nil {
		e.problem("standard-webhooks refused a request to %s: %v", r.URL.Path, err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	msg, err := decode(r.Header, body)
	if err != nil {
		e.problem("decode a request: %v", err)
		http.Error(w, "undecodable", http.StatusBadRequest)
		return
	}
	req := request{id: r.Header.Get(httpsink.HeaderID), timestamp: r.Header.Get(httpsink.HeaderTimestamp), signature: r.Header.Get(httpsink.HeaderSignature), at: time.Now(), msg: msg}
	if req.id != msg.ID.String() {
		e.problem("webhook-id %s, event id %s", req.id, msg.ID)
	}
	e.mu.Lock()
	e.all = append(e.all, req)
	e.mu.Unlock()
	if e.answer(w, r, req) {
		e.mu.Lock()
		e.got = append(e.got, req)
		e.mu.Unlock()
	}
}

func (e *endpoint) problem(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.problems = append(e.problems, fmt.Sprintf(format, args...))
}

// decode reads a request back into a message: its headers, lowercased (HTTP names
// are case-insensitive), but the webhook and transport ones, and its body.
func decode(header http.Header, body []byte) (outbox.Message, error) {
	var hs []sinkformat.Header
	for name, values := range header {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "webhook-") || lower == "user-agent" || lower == "content-length" || lower == "accept-encoding" {
			continue
		}
		if len(values) != 1 {
			return outbox.Message{}, fmt.Errorf("header %s sent %d times", name, len(values))
		}
		hs = append(hs, sinkformat.Header{Name: lower, Value: values[0]})
	}
	return sinkformat.Decode(sinkformat.HTTP, hs, body)
}

// requests returns what the endpoint accepted (all: every verified request).
func (e *endpoint) requests(all bool) []request {
	e.mu.Lock()
	defer e.mu.Unlock()
	if all {
		return append([]request(nil), e.all...)
	}
	return append([]request(nil), e.got...)
}

func (e *endpoint) received(context.Context) ([]outbox.Message, error) {
	var msgs []outbox.Message
	for _, r := range e.requests(false) {
		msgs = append(msgs, r.msg)
	}
	return msgs, nil
}

func (e *endpoint) ids(context.Context) ([]string, error) {
	var ids []string
	for _, r := range e.requests(false) {
		ids = append(ids, r.id)
	}
	return ids, nil
}

func (e *endpoint) addr() string { return e.srv.Listener.Addr().String() }

// tls is a client configuration that trusts the endpoint's certificate.
func (e *endpoint) tls() *tls.Config {
	return newTLSConfig(e.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs)
}

func newTLSConfig(roots *x509.CertPool) *tls.Config { return &tls.Config{RootCAs: roots} }

// resolve maps every name below example.com to 127.0.0.1, but missing.example.com,
// which does not exist, and flaky.example.com, whose DNS server fails.
func resolve(_ context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case "missing.example.com":
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	case "flaky.example.com":
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}
	if strings.HasSuffix(host, ".example.com") || strings.HasSuffix(host, ".other.test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// newSink builds a sink on cfg (nil: defaults for tests) posting to
// https://hooks.example.com at addr's port, with 127.0.0.1 allowed; closed when t
// ends.
func newSink(t *testing.T, e *endpoint, addr string, cfg *httpsink.Config) *httpsink.Sink {
	t.Helper()
	var c httpsink.Config
	if cfg != nil {
		c = *cfg
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	c.URL = strings.ReplaceAll(cmp.Or(c.URL, "https://hooks.example.com:PORT/events/{{.AggregateType}}"), "PORT", port)
	if c.AllowedHosts == nil {
		c.AllowedHosts = []string{"hooks.example.com", "*.hooks.example.com"}
	}
	if c.Secrets == nil {
		c.Secrets = []string{secretNew, secretOld}
	}
	c.AllowPrivate = append(c.AllowPrivate, netip.MustParsePrefix("127.0.0.1/32"))
	if c.Resolve == nil {
		c.Resolve = resolve
	}
	if c.TLS == nil {
		c.TLS = e.tls()
	}
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 5*time.Second)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, 2*time.Second)
	s, err := httpsink.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newProxy starts an in-process TCP proxy to upstream (host:port), stopped when t ends.
func newProxy(t *testing.T, upstream string) *toxiproxy.Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, t.Name(), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// message is one event of aggregate id.
func message(id string) outbox.Message {
	return outbox.Message{
		ID: outbox.NewID(), AggregateType: "order", AggregateID: id, AggregateVersion: 1, EventType: "order.paid", SchemaVersion: 1,
		ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"amount": 1200}`), Attempt: 1,
	}
}
