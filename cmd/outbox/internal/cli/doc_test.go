package cli_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
)

var update = flag.Bool("update", false, "rewrite the options table of docs/configuration.md")

const (
	docPath    = "../../../../docs/configuration.md"
	tableBegin = "<!-- options: begin (generated: go test ./cmd/outbox/internal/cli -run TestConfigurationDoc -update) -->\n"
	tableEnd   = "<!-- options: end -->"
)

// TestConfigurationDoc checks that docs/configuration.md lists every option with its
// environment variable, flag and default, and nothing else: the table is the code's.
func TestConfigurationDoc(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	before, rest, ok := strings.Cut(doc, tableBegin)
	table, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("%s lacks the options table markers", docPath)
	}
	want := cli.OptionsTable()
	if table == want {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(before+tableBegin+want+tableEnd+after), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the options table of %s differs from the code; run with -update.\nwant:\n%s\ngot:\n%s", docPath, want, table)
}
