package httpsink_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/httpsink"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	ok := httpsink.Config{URL: "https://hooks.example.com/x", AllowedHosts: []string{"hooks.example.com"}, Secrets: []string{secretOld}}
	for _, c := range []struct {
		change func(*httpsink.Config)
		want   string
	}{
		{func(c *httpsink.Config) { c.URL = "" }, "URL is required"},
		{func(c *httpsink.Config) { c.URL = "{{.AgregateType}}" }, "URL"},
		{func(c *httpsink.Config) { c.AllowedHosts = nil }, "AllowedHosts is required"},
		{func(c *httpsink.Config) { c.AllowedHosts = []string{"https://x"} }, "AllowedHosts[0]"},
		{func(c *httpsink.Config) { c.Secrets = nil }, "Secrets is required"},
		{func(c *httpsink.Config) { c.Secrets = []string{secretOld, "whsec_c2hvcnQ="} }, "Secrets[1]"},
		{func(c *httpsink.Config) { c.RequestTimeout = -1 }, "RequestTimeout"},
		{func(c *httpsink.Config) { c.MaxConnsPerHost = -1 }, "MaxConnsPerHost"},
		{func(c *httpsink.Config) { c.Format = "xml" }, "Format"},
	} {
		cfg := ok
		c.change(&cfg)
		if _, err := httpsink.New(&cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error about %s", err, c.want)
		}
	}
	if _, err := httpsink.New(nil); err == nil {
		t.Error("New(nil): no error")
	}
	if s, err := httpsink.New(&ok); err != nil {
		t.Errorf("New(a good config): %v", err)
	} else {
		_ = s.Close()
	}
}

// A URL the rules refuse fails its event permanently before anything is resolved or
// dialled (the resolver would fail the test), and other aggregates are not held up.
func TestURLRules(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, want string
		allowHTTP bool
	}{
		{"https://evil.example.net/x", "not in AllowedHosts", false},
		{"https://hooks.example.com.evil.net/x", "not in AllowedHosts", false},
		{"https://xhooks.example.com/x", "not in AllowedHosts", false},
		{"http://hooks.example.com/x", "plain http is refused", false},
		{"ftp://hooks.example.com/x", "not https", false},
		{"https://user:pw@hooks.example.com/x", "credentials", false},
		{"https:///x", "no host", false},
		{"https://2130706433/", "non-standard form", true},
		{"https://0177.0.0.1/", "non-standard form", true},
		{"https://0x7f.1/", "non-standard form", true},
		{"https://[::1]/x", "not in AllowedHosts", false},
		{"https://169.254.169.254/latest/meta-data", "not in AllowedHosts", false},
	} {
		s, err := httpsink.New(&httpsink.Config{
			URL: c.url, AllowedHosts: []string{"hooks.example.com", "*.hooks.example.com"}, Secrets: []string{secretOld}, AllowHTTP: c.allowHTTP,
			Resolve: func(context.Context, string) ([]netip.Addr, error) {
				t.Errorf("%s: resolved, though the URL is refused", c.url)
				return nil, errors.New("no")
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		errs := s.Publish(t.Context(), []outbox.Message{{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "x", SchemaVersion: 1}})
		if !outbox.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("URL %s: %v, want permanent, saying %q", c.url, errs[0], c.want)
		}
	}
}

// Allowed hosts match without case or a final dot, and by wildcard below a domain;
// an allowed IP matches the same address written otherwise.
func TestAllowedHostsMatch(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"https://HOOKS.example.com./x", "https://a.b.hooks.example.com/x", "https://[::1]:8443/x", "https://[0:0::1]/x"} {
		s, err := httpsink.New(&httpsink.Config{
			URL: u, AllowedHosts: []string{"hooks.example.com", "*.hooks.example.com", "[::1]"}, Secrets: []string{secretOld},
			Resolve: func(context.Context, string) ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("::1")}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Routing passes, and the guard refuses the loopback address the host resolves to.
		errs := s.Publish(t.Context(), []outbox.Message{{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "x", SchemaVersion: 1}})
		var blocked *httpsink.BlockedError
		if !errors.As(errs[0], &blocked) || !outbox.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "::1 (loopback)") {
			t.Errorf("URL %s: %v, want it routed and then refused at the dial as loopback", u, errs[0])
		}
	}
}
