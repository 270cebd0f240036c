package cli

import (
	"reflect"
	"slices"
	"testing"

	"github.com/outboxkit/outbox/relay"
)

// TestEveryRelayFieldHasAKey checks that each relay.Config field is a configuration
// key, or is set by the command itself: a field added to the library shows up here.
func TestEveryRelayFieldHasAKey(t *testing.T) {
	t.Parallel()
	byCommand := []string{"Schema", "Logger", "Observer"} // the schema key; the command's logger and metrics
	var fields []string
	for f := range reflect.TypeFor[relay.Config]().Fields() {
		if f.Name == "Retention" {
			for g := range f.Type.Fields() {
				fields = append(fields, "Retention."+g.Name)
			}
			continue
		}
		fields = append(fields, f.Name)
	}
	for _, f := range fields {
		if slices.Contains(byCommand, f) {
			continue
		}
		if !slices.ContainsFunc(options, func(o option) bool { return fieldOf(o.key) == f }) {
			t.Errorf("relay.Config.%s has no configuration key", f)
		}
	}
}

func TestDSNPassword(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"postgres://u:s3cret@h:5432/db":        "s3cret",
		"postgres://u:s3cret@h:bad/db":         "s3cret", // does not parse as a URL
		"postgres://u@h/db?password=s3cret":    "s3cret",
		"host=h password=s3cret dbname=d":      "s3cret",
		"host=h password = 's3 cret' dbname=d": "s3 cret",
		"host=h  password='it\\'s' user=u":     `it\'s`,
		"host=h user=u":                        "",
		"postgres://u@h/db":                    "",
	} {
		if got := dsnPassword(dsn); got != want {
			t.Errorf("dsnPassword(%q) = %q, want %q", dsn, got, want)
		}
	}
}
