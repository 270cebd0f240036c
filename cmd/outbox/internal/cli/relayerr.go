package cli

import (
	"errors"
	"strings"
)

// fieldOf is the relay.Config field an option sets, as the library's errors name it:
// relay.batch_size → BatchSize, retention.keep → Retention.Keep; "" for other options.
func fieldOf(key string) string {
	prefix, rest, ok := strings.Cut(key, ".")
	if !ok || strings.Contains(rest, ".") {
		return ""
	}
	var b strings.Builder
	if prefix == "retention" {
		b.WriteString("Retention.")
	} else if prefix != "relay" {
		return ""
	}
	for w := range strings.SplitSeq(rest, "_") {
		if w == "ttl" {
			b.WriteString("TTL")
			continue
		}
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// keyedRelayError rewrites relay.New's error, which names relay.Config fields, to name
// the configuration keys instead, on one line.
func keyedRelayError(err error) error {
	lines := strings.Split(strings.TrimPrefix(err.Error(), "relay config: "), "\n")
	for i, l := range lines {
		for _, o := range options {
			f := fieldOf(o.key)
			if f != "" && (strings.HasPrefix(l, f+" ") || strings.HasPrefix(l, f+":")) {
				lines[i] = o.key + strings.TrimPrefix(l, f)
				break
			}
		}
	}
	return errors.New("relay configuration: " + strings.Join(lines, "; "))
}
