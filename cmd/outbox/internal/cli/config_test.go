package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
)

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "outbox.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// line returns the `outbox config` line of key.
func line(t *testing.T, r result, key string) []string {
	t.Helper()
	for l := range strings.SplitSeq(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == key {
			return f
		}
	}
	t.Fatalf("outbox config lacks %s:\n%s", key, r)
	return nil
}

// TestConfigPrecedence: flags > OUTBOX_* environment > YAML file > defaults.
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	file := writeFile(t, `
schema: from_file
relay:
  batch_size: 11
  max_attempts: 12
  publish_past_dead: [a, b]
  type_weights: [pay=3, mail=1]
  isolated_types: [import]
  type_rates: [import=250.5]
retention:
  keep: 1h
`)
	env := []string{"OUTBOX_CONFIG=" + file, "OUTBOX_RELAY_BATCH_SIZE=21", "OUTBOX_SCHEMA=from_env"}
	r := run(t, env, "config", "--schema", "from_flag")
	if r.code != 0 {
		t.Fatalf("outbox config:\n%s", r)
	}
	for key, want := range map[string][]string{
		"schema":                  {"from_flag", "--schema"},
		"relay.batch_size":        {"21", "OUTBOX_RELAY_BATCH_SIZE"},
		"relay.max_attempts":      {"12", "config", "file", file},
		"relay.publish_past_dead": {"a,b", "config", "file", file},
		"relay.type_weights":      {"pay=3,mail=1", "config", "file", file},
		"relay.isolated_types":    {"import", "config", "file", file},
		"relay.type_rates":        {"import=250.5", "config", "file", file},
		"retention.keep":          {"1h", "config", "file", file},
		"relay.lease_ttl":         {"10s", "default"},
	} {
		if got := line(t, r, key)[1:]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %q, want %q", key, got, want)
		}
	}
}

// TestConfigRefusals: an unknown key, variable or flag and a bad value are refused by
// name, with exit code 2, on one line.
func TestConfigRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		file string
		env  []string
		args []string
		want string
	}{
		{"unknown file key", "relay:\n  bach_size: 3\n", nil, nil, "relay.bach_size: line 2: unknown key"},
		{"bad file value", "relay:\n  batch_size: lots\n", nil, nil, `relay.batch_size: must be an integer, got "lots"`},
		{"out of range", "retention:\n  batch_size: 0\n", nil, nil, "retention.batch_size: must be between 1 and 100000, got 0"},
		{"bad enum", "relay:\n  mode: fifo\n", nil, nil, `relay.mode: must be one of ordered, unordered, got "fifo"`},
		{"bad weight", "relay:\n  type_weights: [pay=0]\n", nil, nil, `relay.type_weights: "pay=0": want type=weight, a weight of 1 or more`},
		{"bad rate", "relay:\n  type_rates: [import=-1]\n", nil, nil, `relay.type_rates: "import=-1": want type=rate, a positive number of events a second`},
		{"bad yaml", "relay: [\n", nil, nil, "config file"},
		{"unknown variable", "", []string{"OUTBOX_RELAY_BATCHSIZE=3"}, nil, "environment: OUTBOX_RELAY_BATCHSIZE: unknown variable"},
		{"bad variable", "", []string{"OUTBOX_RELAY_SHUTDOWN_TIMEOUT=ten"}, nil, `OUTBOX_RELAY_SHUTDOWN_TIMEOUT: must be a duration`},
		{"unknown flag", "", nil, []string{"--relay-bach-size", "3"}, "unknown flag: --relay-bach-size"},
		{"bad flag", "", nil, []string{"--log-level", "loud"}, `flag: --log-level: must be one of debug, info, warn, error, got "loud"`},
		{"secret in a bad value", "", []string{"OUTBOX_DATABASE_MAX_CONNS=x"}, []string{"--sink-http-secrets", "whsec_" + canary}, `OUTBOX_DATABASE_MAX_CONNS: must be an integer`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := tc.env
			if tc.file != "" {
				env = append(env, "OUTBOX_CONFIG="+writeFile(t, tc.file))
			}
			r := run(t, env, append([]string{"config"}, tc.args...)...)
			if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("want exit 2 and one line with %q\n%s", tc.want, r)
			}
		})
	}
	// relay.New's own checks come back naming the key.
	r := run(t, []string{"OUTBOX_DATABASE_URL=postgres://u:" + canary + "@127.0.0.1:1/db", "OUTBOX_HTTP_LISTEN="},
		"relay", "--relay-retry-base-delay", "1m", "--relay-retry-max-delay", "1s")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "relay.retry_max_delay (1s) must be at least RetryBaseDelay") {
		t.Errorf("relay with retry_max_delay < retry_base_delay:\n%s", r)
	}
}

// TestSecretsNeverPrinted: the database password and the webhook secrets appear in no
// output — not outbox config, not an error of a DSN pgx cannot parse (pgx's message
// echoes the connection string, masking only what it recognises), not a connection
// error. run checks every output for the canary; the cases below also check the
// webhook secret.
func TestSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	secret := "whsec_" + canary + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	for _, tc := range []struct {
		name string
		dsn  string
		args []string
	}{
		// pgx's redaction misses a keyword password followed by spaces around '='.
		{"keyword dsn pgx cannot parse", "host=127.0.0.1 password = " + canary + " sslmode=bogus", []string{"status"}},
		{"url dsn pgx cannot parse", "postgres://u:" + canary + "@127.0.0.1:99999999/db", []string{"status"}},
		{"url dsn with a bad option", "postgres://u:" + canary + "@127.0.0.1/db?sslmode=bogus", []string{"status"}},
		{"unreachable database", "postgres://u:" + canary + "@127.0.0.1:1/db?connect_timeout=2", []string{"status"}},
		{"config", "postgres://u:" + canary + "@127.0.0.1/db", []string{"config", "--sink-http-secrets", secret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, []string{"OUTBOX_DATABASE_URL=" + tc.dsn}, tc.args...)
			noSecret(t, r.stdout+r.stderr, secret)
			if r.stdout+r.stderr == "" {
				t.Errorf("no output at all")
			}
			t.Log(r)
		})
	}
}
