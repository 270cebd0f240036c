package httpsink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// BlockedError is the error of a connection the sink refused to open: every address
// the host resolved to is in a range it does not connect to (loopback, private,
// link-local — the cloud metadata service —, shared, multicast or reserved) and not
// in Config.AllowPrivate. The sink marks it [outbox.Permanent].
type BlockedError struct {
	// Host is the name or address the URL named.
	Host string
	// Refused lists each address and why it was refused, e.g. "169.254.169.254 (link-local)".
	Refused []string
}

// Error names the host and each refused address with its range.
func (e *BlockedError) Error() string {
	return fmt.Sprintf("refused to connect to %s: %s; allow a range with Config.AllowPrivate if this is meant", e.Host, strings.Join(e.Refused, ", "))
}

// reserved are the ranges beyond netip's own predicates that the sink does not
// connect to.
var reserved = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (carrier-grade NAT; some clouds' metadata)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (and broadcast)"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (embeds an IPv4 address)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local NAT64"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001::/32"), "Teredo (embeds an IPv4 address)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 (embeds an IPv4 address)"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// blockedRange says why the sink does not connect to a, or "" when it does. An
// IPv4-mapped IPv6 address is judged as the IPv4 address it holds.
func blockedRange(a netip.Addr, allow []netip.Prefix) string {
	a = a.Unmap().WithZone("")
	for _, p := range allow {
		if p.Contains(a) {
			return ""
		}
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	}
	for _, r := range reserved {
		if r.prefix.Contains(a) {
			return r.why
		}
	}
	return ""
}

// guard dials for the sink's transport: it resolves the host itself and connects only
// to the addresses it permits, so the address checked is the address connected to —
// on every connection, whatever the name resolved to when the URL was checked.
type guard struct {
	allow   []netip.Prefix
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// connect opens a connection to an address the guard permitted.
	connect func(ctx context.Context, network, address string) (net.Conn, error)
}

func newGuard(allow []netip.Prefix, resolve func(context.Context, string) ([]netip.Addr, error), timeout time.Duration) *guard {
	dialer := &net.Dialer{Timeout: timeout}
	return &guard{allow: allow, resolve: resolve, connect: dialer.DialContext}
}

// dial is the transport's DialContext.
func (g *guard) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("httpsink: dial %q: %w", address, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("httpsink: dial %q: port: %w", address, err)
	}
	addrs, err := g.addresses(ctx, host)
	if err != nil {
		return nil, err
	}
	blocked := &BlockedError{Host: host}
	var dialErr error
	for _, a := range addrs {
		if why := blockedRange(a, g.allow); why != "" {
			blocked.Refused = append(blocked.Refused, fmt.Sprintf("%s (%s)", a.Unmap(), why))
			continue
		}
		conn, err := g.connect(ctx, network, netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		dialErr = err
	}
	if dialErr != nil {
		return nil, dialErr
	}
	return nil, blocked
}

// addresses returns host's addresses: itself when it is an IP address, else what
// the resolver says.
func (g *guard) addresses(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := g.resolve(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("httpsink: resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// defaultResolve is Config.Resolve's default.
func defaultResolve(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// numericHost reports whether host looks like an IPv4 address in a form other than
// dotted decimal — "2130706433", "0177.0.0.1", "0x7f.1" — which some resolvers read
// as an address: no registered name ends in a numeric label.
func numericHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") || strings.HasPrefix(last, "0X") {
		return true
	}
	return strings.Trim(last, "0123456789") == ""
}

var errNotAllowed = errors.New("host is not in AllowedHosts")
