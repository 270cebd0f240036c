package outbox_test

import (
	"os"
	"strings"
	"testing"
)

// The README's quick start is the body of quickStart (quickstart_example_test.go),
// which compiles and runs as Example_quickStart: the README cannot drift into code
// that does not build.
func TestReadmeQuickStartIsTheExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, afterHeading, ok := strings.Cut(string(readme), "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	_, block, ok := strings.Cut(afterHeading, "```go\n")
	if !ok {
		t.Fatal("README.md's quick start has no go code block")
	}
	block, _, _ = strings.Cut(block, "```")

	src, err := os.ReadFile("quickstart_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "\t// quick start begins\n")
	if !ok {
		t.Fatal("quickstart_example_test.go has no begin marker")
	}
	body, _, ok = strings.Cut(body, "\t// quick start ends\n")
	if !ok {
		t.Fatal("quickstart_example_test.go has no end marker")
	}
	var example []string
	for line := range strings.Lines(body) {
		example = append(example, strings.TrimPrefix(line, "\t"))
	}
	if got, want := block, strings.Join(example, ""); got != want {
		t.Errorf("README.md's quick start differs from quickStart's body in quickstart_example_test.go\nREADME:\n%s\nexample:\n%s", got, want)
	}
}
