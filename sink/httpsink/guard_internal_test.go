package httpsink

import (
	"net/netip"
	"testing"
	"time"
)

func TestBlockedRanges(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1":        "loopback",
		"127.255.0.9":      "loopback",
		"::1":              "loopback",
		"::ffff:127.0.0.1": "loopback",
		"169.254.169.254":  "link-local",
		"::ffff:a9fe:a9fe": "link-local", // 169.254.169.254, IPv4-mapped
		"fe80::1%eth0":     "link-local",
		"10.1.2.3":         "private",
		"172.16.0.1":       "private",
		"192.168.1.1":      "private",
		"fd00::1":          "private",
		"fd00:ec2::254":    "private", // a cloud's IPv6 metadata address
		"0.0.0.0":          "unspecified",
		"::":               "unspecified",
		"0.1.2.3":          `"this network"`,
		"100.100.100.200":  "shared address space (carrier-grade NAT; some clouds' metadata)",
		"224.0.0.1":        "multicast",
		"ff02::1":          "multicast",
		"255.255.255.255":  "reserved (and broadcast)",
		"64:ff9b::7f00:1":  "NAT64 (embeds an IPv4 address)",
		"::7f00:1":         "IPv4-compatible",
		"2002:7f00:1::":    "6to4 (embeds an IPv4 address)",
		"93.184.216.34":    "",
		"8.8.8.8":          "",
		"2606:4700::1111":  "",
	} {
		if got := blockedRange(netip.MustParseAddr(addr), nil); got != want {
			t.Errorf("blockedRange(%s) = %q, want %q", addr, got, want)
		}
	}
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.20.0.0/16")}
	for addr, want := range map[string]string{"127.0.0.1": "", "::ffff:127.0.0.1": "", "127.0.0.2": "loopback", "10.20.3.4": "", "10.21.0.1": "private"} {
		if got := blockedRange(netip.MustParseAddr(addr), allow); got != want {
			t.Errorf("with AllowPrivate, blockedRange(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestNumericHost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"2130706433": true, "0177.0.0.1": true, "0x7f.1": true, "127.1": true, "0x7f000001": true,
		"127.0.0.1": false, "::1": false, "hooks.example.com": false, "1password.com": false, "a.b2": false,
	} {
		if got := numericHost(host); got != want {
			t.Errorf("numericHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for v, want := range map[string]int64{"7": 7, "0": -1, "-3": -1, "soon": -1, "": -1, now.Add(90e9).UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"): 90} {
		d, ok := retryAfter(v, now)
		switch {
		case want < 0 && ok:
			t.Errorf("retryAfter(%q) = %s, want none", v, d)
		case want >= 0 && (!ok || d.Round(1e9).Seconds() != float64(want)):
			t.Errorf("retryAfter(%q) = %s %v, want %ds", v, d, ok, want)
		}
	}
}
