// Package httpsink is an [outbox.Sink] that POSTs each event to an HTTP endpoint — a
// webhook — signed as the Standard Webhooks spec defines, on the standard library's
// net/http alone.
//
// One event is one request: the body is the payload, byte for byte; the headers are
// the shared message format (docs/message-format.md) — the default names, or
// CloudEvents binary mode ("ce-" headers, the CloudEvents HTTP binding) — and
// webhook-id (the event id: the same on every attempt), webhook-timestamp and
// webhook-signature ("v1,<base64 HMAC-SHA256>" of "id.timestamp.body" for each
// secret, so a rotation can overlap). [Verify] checks them on the receiving side.
//
// A 2xx answer is success. 429 and 5xx are transient, and a Retry-After they carry
// is passed on with [outbox.RetryAfter] (the relay waits the longer of it and its
// own backoff). A redirect is never followed: it fails permanently, its Location in
// the reason. Every other 4xx (410 Gone included) is permanent. A request that gets
// no complete answer within RequestTimeout is transient — the endpoint may have
// processed it, and the retry carries the same webhook-id, with a new timestamp and
// signature. A refused or dropped connection is [outbox.Unavailable]. TLS
// certificates are verified; plain http:// is refused unless AllowHTTP is set.
//
// Each aggregate's events go one request after another, and the first that fails
// stops the aggregate's later events in the call ([outbox.ErrNotSent]); different
// aggregates' requests go at once, at most MaxConnsPerHost to one host.
//
// Server-side request forgery: a URL must name a host in AllowedHosts, and the sink
// resolves each host itself when it connects and connects only to the addresses it
// permits — none that is loopback, private, link-local (the cloud metadata service at
// 169.254.169.254), shared, multicast or reserved, IPv4-mapped IPv6 judged as IPv4,
// unless AllowPrivate names its range. The check runs on every connection, so a name
// that resolves to a public address when the URL is configured and to a private one
// later (DNS rebinding) is refused then. The sink never uses an HTTP proxy from the
// environment.
//
// Durability: success means the endpoint answered 2xx; what it did with the event is
// up to it. Delivery is at least once: a receiver deduplicates by webhook-id.
package httpsink

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// DefaultUserAgent is the User-Agent of a Config without one.
const DefaultUserAgent = "outbox-httpsink"

// Config configures a [Sink]. Zero fields take the defaults given at each.
type Config struct {
	// URL is a text/template over the [outbox.Message] giving the URL each event is
	// POSTed to, such as "https://hooks.example.com/{{.AggregateType}}". An event's
	// Topic does not replace it (a topic is no URL); the template can read it:
	// `https://hooks.example.com/{{or .Topic "events"}}`. A URL the rules below
	// refuse fails its event permanently. Required.
	URL string
	// AllowedHosts lists the hosts a URL may name: names, compared without case or a
	// final ".", "*.example.com" for every name below example.com, or IP addresses.
	// Required.
	AllowedHosts []string
	// Secrets are the signing secrets, "whsec_" and the base64 of a 24 to 64 byte key,
	// as the Standard Webhooks spec writes them. Each request carries one signature per
	// secret: during a rotation, list the new and the old. Required.
	Secrets []string
	// AllowPrivate lists address ranges the sink may connect to although they are
	// loopback, private, link-local, shared, multicast or reserved, such as
	// 10.20.0.0/16 for an endpoint on your own network. Default none.
	AllowPrivate []netip.Prefix
	// AllowHTTP permits plain http:// URLs. Default false: https only.
	AllowHTTP bool
	// TLS is the TLS client configuration (RootCAs, client certificates). Server
	// certificates are verified unless it sets InsecureSkipVerify; versions below TLS
	// 1.2 are refused. Default: the system's roots.
	TLS *tls.Config
	// Resolve looks a host name's addresses up when the sink connects; each address
	// is checked before it is connected to. Default net.DefaultResolver.LookupNetIP
	// with network "ip".
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// ConnectTimeout bounds a connection's dial and its TLS handshake. Default 5s.
	ConnectTimeout time.Duration
	// RequestTimeout bounds one request, from sending it to reading its response
	// (at most MaxResponseBytes of the body), however slowly the endpoint answers.
	// Default 10s.
	RequestTimeout time.Duration
	// MaxResponseBytes bounds how much of a response body is read; the rest is
	// dropped with the connection. Default 64 KiB.
	MaxResponseBytes int64
	// MaxConnsPerHost bounds the requests in flight to one host, over all Publish
	// calls, and so the connections to it. Default 8.
	MaxConnsPerHost int
	// MaxRetryAfter caps the pause a Retry-After header can ask for. Default 10m.
	MaxRetryAfter time.Duration
	// Format of the headers: [sinkformat.Outbox] (default) or [sinkformat.CloudEvents].
	Format sinkformat.Format
	// Source is the CloudEvents source attribute. Default [sinkformat.DefaultSource].
	Source string
	// UserAgent is every request's User-Agent. Default [DefaultUserAgent].
	UserAgent string
	// Logger: default discard.
	Logger *slog.Logger
}

// Sink POSTs events to webhooks. It is safe for concurrent use; Close it when done.
type Sink struct {
	cfg       Config
	router    *sinkformat.Router
	encoder   *sinkformat.Encoder
	keys      [][]byte
	guard     *guard
	transport *http.Transport
	client    *http.Client

	mu    sync.Mutex
	slots map[string]chan struct{} // per host: a token per request in flight
}

// New returns a sink with cfg; it connects to nothing until the first Publish. A nil
// cfg is not valid: URL, AllowedHosts and Secrets are required.
func New(cfg *Config) (*Sink, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("httpsink: %w", err)
	}
	s := &Sink{cfg: c, slots: make(map[string]chan struct{})}
	for i, secret := range c.Secrets {
		key, err := parseSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("httpsink: Secrets[%d]: %w", i, err)
		}
		s.keys = append(s.keys, key)
	}
	if s.router, err = sinkformat.NewRouter(c.URL, s.checkURL); err != nil {
		return nil, fmt.Errorf("httpsink: URL: %w", err)
	}
	if s.encoder, err = sinkformat.NewEncoder(sinkformat.HTTP, c.Format, c.Source); err != nil {
		return nil, fmt.Errorf("httpsink: %w", err)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLS != nil {
		tlsConfig = c.TLS.Clone()
		tlsConfig.MinVersion = max(tlsConfig.MinVersion, tls.VersionTLS12)
	}
	s.guard = newGuard(c.AllowPrivate, c.Resolve, c.ConnectTimeout)
	s.transport = &http.Transport{
		Proxy:                  nil, // a proxy would connect for us, past the guard
		DialContext:            s.guard.dial,
		TLSClientConfig:        tlsConfig,
		TLSHandshakeTimeout:    c.ConnectTimeout,
		ResponseHeaderTimeout:  c.RequestTimeout,
		MaxResponseHeaderBytes: 64 << 10,
		MaxConnsPerHost:        c.MaxConnsPerHost,
		MaxIdleConnsPerHost:    c.MaxConnsPerHost,
		IdleConnTimeout:        90 * time.Second,
		DisableCompression:     true,
	}
	s.client = &http.Client{
		Transport:     s.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s, nil
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 5*time.Second)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 10*time.Second)
	cfg.MaxResponseBytes = cmp.Or(cfg.MaxResponseBytes, 64<<10)
	cfg.MaxConnsPerHost = cmp.Or(cfg.MaxConnsPerHost, 8)
	cfg.MaxRetryAfter = cmp.Or(cfg.MaxRetryAfter, 10*time.Minute)
	cfg.UserAgent = cmp.Or(cfg.UserAgent, DefaultUserAgent)
	if cfg.Resolve == nil {
		cfg.Resolve = defaultResolve
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.URL == "" {
		errs = append(errs, errors.New("URL is required"))
	}
	if len(cfg.AllowedHosts) == 0 {
		errs = append(errs, errors.New("AllowedHosts is required: the hosts a URL may name"))
	}
	for i, h := range cfg.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") && !isIP(strings.Trim(h, "[]")) {
			errs = append(errs, fmt.Errorf("AllowedHosts[%d] %q is not a host name or IP address", i, h))
		}
	}
	if len(cfg.Secrets) == 0 {
		errs = append(errs, errors.New("Secrets is required: at least one whsec_ signing secret"))
	}
	for name, d := range map[string]time.Duration{"ConnectTimeout": cfg.ConnectTimeout, "RequestTimeout": cfg.RequestTimeout, "MaxRetryAfter": cfg.MaxRetryAfter} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, d))
		}
	}
	if cfg.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxResponseBytes must be positive, got %d", cfg.MaxResponseBytes))
	}
	if cfg.MaxConnsPerHost < 0 {
		errs = append(errs, fmt.Errorf("MaxConnsPerHost must be positive, got %d", cfg.MaxConnsPerHost))
	}
	return cfg, errors.Join(errs...)
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// Close closes the sink's idle connections. Publish must not be called after it.
func (s *Sink) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// checkURL is the router's rule for a destination: an absolute https (or, with
// AllowHTTP, http) URL without credentials, naming an allowed host.
func (s *Sink) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	switch {
	case u.Scheme == "http" && !s.cfg.AllowHTTP:
		return errors.New("plain http is refused (set AllowHTTP to permit it)")
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("scheme %q is not https", u.Scheme)
	case u.User != nil:
		return errors.New("credentials in a URL are refused")
	case u.Host == "" || u.Opaque != "":
		return errors.New("the URL names no host")
	}
	host := normalHost(u.Hostname())
	if numericHost(host) {
		return fmt.Errorf("host %q is an address in a non-standard form", host)
	}
	if !s.allowedHost(host) {
		return fmt.Errorf("%w: %q", errNotAllowed, host)
	}
	return nil
}

func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// allowedHost reports whether host (normalised) is in AllowedHosts.
func (s *Sink) allowedHost(host string) bool {
	ha, hostIsIP := netip.ParseAddr(host)
	for _, allowed := range s.cfg.AllowedHosts {
		allowed = normalHost(strings.Trim(allowed, "[]"))
		switch {
		case hostIsIP == nil:
			if a, err := netip.ParseAddr(allowed); err == nil && a == ha {
				return true
			}
		case strings.HasPrefix(allowed, "*."):
			if strings.HasSuffix(host, allowed[1:]) {
				return true
			}
		case host == allowed:
			return true
		}
	}
	return false
}

// call is the state one Publish call shares between its aggregates: the hosts found
// unreachable, so that the others do not wait on them too.
type call struct {
	mu   sync.Mutex
	down map[string]error
}

func (c *call) downErr(host string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down[host]
}

func (c *call) setDown(host string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down == nil {
		c.down = make(map[string]error)
	}
	c.down[host] = err
}

// Publish POSTs msgs, each aggregate's one after another, the aggregates at once, and
// returns one result per message: nil for a 2xx answer, a plain (transient) error for
// 429, 5xx, a timeout or a TLS failure (with [outbox.RetryAfter] when the endpoint
// asked for a pause), [outbox.Permanent] for a redirect, any other 4xx, a refused URL,
// header or address, [outbox.Unavailable] when the endpoint cannot be connected to,
// ctx's error when it ends first, and [outbox.ErrNotSent] after an earlier message of
// the same aggregate failed.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	c := &call{}
	var wg sync.WaitGroup
	for _, group := range sinkformat.Aggregates(ctx, msgs) {
		wg.Go(func() { s.publishAggregate(ctx, c, msgs, group, errs) })
	}
	wg.Wait()
	return errs
}

// publishAggregate sends one aggregate's messages in order, until one fails.
func (s *Sink) publishAggregate(ctx context.Context, c *call, msgs []outbox.Message, group []int, errs []error) {
	for n, i := range group {
		err := s.send(ctx, c, &msgs[i])
		if err == nil {
			continue
		}
		errs[i] = err
		later := outbox.ErrNotSent
		switch {
		case ctx.Err() != nil:
			later = fmt.Errorf("httpsink: not sent: %w", ctx.Err())
		case outbox.IsUnavailable(err):
			later = err // every message of a call that met an outage says so
		}
		for _, j := range group[n+1:] {
			errs[j] = later
		}
		return
	}
}

// send POSTs one message and classifies the outcome.
func (s *Sink) send(ctx context.Context, c *call, m *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("httpsink: event %s: %w", m.ID, err)
	}
	dest, header, err := s.request(m)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("httpsink: event %s: %w", m.ID, err))
	}
	host := strings.ToLower(dest.Host)
	if err := c.downErr(host); err != nil {
		return err
	}
	release, err := s.acquire(ctx, host)
	if err != nil {
		return fmt.Errorf("httpsink: event %s: waiting for a connection to %s: %w", m.ID, host, err)
	}
	defer release()

	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	id := m.ID.String()
	unix := time.Now().Unix()
	header[HeaderID] = []string{id}
	header[HeaderTimestamp] = []string{strconv.FormatInt(unix, 10)}
	header[HeaderSignature] = []string{signatureHeader(s.keys, id, unix, m.Payload)}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, dest.String(), bytes.NewReader(m.Payload))
	if err != nil {
		return outbox.Permanent(fmt.Errorf("httpsink: event %s: %w", m.ID, err))
	}
	req.Header = header
	where := "POST " + redact(dest)
	resp, err := s.client.Do(req)
	if err != nil {
		err = s.transportError(ctx, rctx, m, where, err)
		if outbox.IsUnavailable(err) {
			c.setDown(host, err)
		}
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	// Read what the cap allows (so a small body leaves the connection reusable), and
	// no longer than the request's time: success depends on the status alone.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseBytes))
	return s.statusError(m, where, resp, body)
}

// request builds m's URL and headers.
func (s *Sink) request(m *outbox.Message) (*url.URL, http.Header, error) {
	raw, err := s.router.Execute(m)
	if err != nil {
		return nil, nil, err
	}
	dest, err := url.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	hs, err := s.encoder.Headers(*m)
	if err != nil {
		return nil, nil, err
	}
	header := make(http.Header, len(hs)+4)
	for _, h := range hs {
		if strings.ToLower(h.Name) != h.Name {
			return nil, nil, fmt.Errorf("%w: name %q is not lower case: HTTP names are case-insensitive, and a receiver reads them back as written only when they are lower case", sinkformat.ErrHeader, h.Name)
		}
		header[h.Name] = []string{h.Value}
	}
	header.Set("User-Agent", s.cfg.UserAgent)
	return dest, header, nil
}

// acquire takes one of host's request slots.
func (s *Sink) acquire(ctx context.Context, host string) (func(), error) {
	s.mu.Lock()
	slot, ok := s.slots[host]
	if !ok {
		slot = make(chan struct{}, s.cfg.MaxConnsPerHost)
		s.slots[host] = slot
	}
	s.mu.Unlock()
	select {
	case slot <- struct{}{}:
		return func() { <-slot }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// transportError classifies a request that got no response: the caller's ctx ended,
// the guard refused the address (permanent), no complete answer in time or a TLS
// failure (transient: the same endpoint may answer the retry), a name that does not
// exist (transient), or no connection (unavailable).
func (s *Sink) transportError(ctx, rctx context.Context, m *outbox.Message, where string, err error) error {
	var blocked *BlockedError
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("httpsink: event %s: %s: %w", m.ID, where, ctx.Err())
	case errors.As(err, &blocked):
		s.cfg.Logger.Warn("httpsink: refused to connect", slog.String("host", blocked.Host), slog.Any("refused", blocked.Refused))
		return outbox.Permanent(fmt.Errorf("httpsink: event %s: %s: %w", m.ID, where, blocked))
	case rctx.Err() != nil || errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("httpsink: event %s: %s: no complete answer within RequestTimeout %s (the endpoint may have processed it; the retry carries the same %s): %w",
			m.ID, where, s.cfg.RequestTimeout, HeaderID, err)
	case isTLSError(err):
		return fmt.Errorf("httpsink: event %s: %s: TLS: %w", m.ID, where, err)
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return fmt.Errorf("httpsink: event %s: %s: %w", m.ID, where, err)
	}
	return outbox.Unavailable(fmt.Errorf("httpsink: event %s: %s: %w", m.ID, where, err))
}

// isTLSError reports whether err is a failed TLS handshake: a certificate that does
// not verify, an alert from the server, or a server that does not speak TLS.
func isTLSError(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	var alert tls.AlertError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &record) || errors.As(err, &alert) ||
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") // net/http's own, for a RecordHeaderError
}

// statusError classifies a response by its status.
func (s *Sink) statusError(m *outbox.Message, where string, resp *http.Response, body []byte) error {
	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		return nil
	}
	err := fmt.Errorf("httpsink: event %s: %s: %s%s", m.ID, where, resp.Status, snippet(body))
	switch {
	case code >= 300 && code <= 399:
		return outbox.Permanent(fmt.Errorf("%w: redirect to %q not followed", err, clip(resp.Header.Get("Location"), 512)))
	case code == http.StatusTooManyRequests || code >= 500:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return outbox.RetryAfter(err, min(d, s.cfg.MaxRetryAfter))
		}
		return err
	case code >= 400:
		return outbox.Permanent(err)
	}
	return err // 1xx as a final answer: the endpoint misbehaves, perhaps not for long
}

// retryAfter reads a Retry-After value: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0, false
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now), true
	}
	return 0, false
}

// snippet quotes the start of a response body for an error.
func snippet(body []byte) string {
	if len(body) == 0 {
		return ""
	}
	return fmt.Sprintf(": %q", clip(string(body), 256))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// redact drops a URL's query and fragment, which may hold a token, from errors.
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return r.String()
}
