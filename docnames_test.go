package outbox_test

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docTestName is a test, fuzz test, benchmark or example named in prose, optionally
// qualified by its package: `TestGapRetry`, `natssink.TestRunnerEffectsExactlyOnce`.
var docTestName = regexp.MustCompile(`\b(?:([a-z][a-z0-9]*)\.)?((?:Test|Fuzz|Benchmark|Example)[A-Z_][A-Za-z0-9_]*)`)

// testFunc declares a top-level test, fuzz test, benchmark or example.
var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)\(`)

// packageClause is a Go file's package clause.
var packageClause = regexp.MustCompile(`(?m)^package ([A-Za-z0-9_]+)`)

// testFuncs returns, for every test function declared in a *_test.go file under root,
// the packages declaring it (an external test package counts as the package it tests:
// outbox_test is outbox).
func testFuncs(t *testing.T, root string) map[string][]string {
	t.Helper()
	defs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := ""
		if m := packageClause.FindSubmatch(src); m != nil {
			pkg = strings.TrimSuffix(string(m[1]), "_test")
		}
		for _, m := range testFunc.FindAllSubmatch(src, -1) {
			defs[string(m[1])] = append(defs[string(m[1])], pkg)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the repository's test files: %v", err)
	}
	return defs
}

// missingTestNames returns, for each document (name → text), the test names it
// mentions that defs does not declare (or not in the package that qualifies them),
// as "file:line: name".
func missingTestNames(docs map[string]string, defs map[string][]string) []string {
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		for i, line := range strings.Split(docs[name], "\n") {
			for _, m := range docTestName.FindAllStringSubmatch(line, -1) {
				qual, fn := m[1], m[2]
				pkgs, ok := defs[fn]
				switch {
				case !ok:
					missing = append(missing, fmt.Sprintf("%s:%d: %s: no such test function in any *_test.go file", name, i+1, m[0]))
				case qual != "" && !slices.Contains(pkgs, qual):
					missing = append(missing, fmt.Sprintf("%s:%d: %s: %s is declared in package %s, not %s", name, i+1, m[0], fn, strings.Join(pkgs, ", "), qual))
				}
			}
		}
	}
	return missing
}

// Every test the README and docs/ name as proof exists, in the package they say: a
// renamed or deleted test cannot leave the guarantees page citing nothing.
func TestDocsNameOnlyExistingTests(t *testing.T) {
	t.Parallel()
	docs := map[string]string{}
	read := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.ToSlash(path)] = string(b)
	}
	read("README.md")
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			read(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defs := testFuncs(t, ".")
	named := 0
	for _, text := range docs {
		named += len(docTestName.FindAllString(text, -1))
	}
	if named < 50 {
		t.Fatalf("found only %d test names in README.md and docs/: the pattern no longer matches how they are written", named)
	}
	for _, m := range missingTestNames(docs, defs) {
		t.Error(m)
	}
}

// The check finds a name that no test declares, and a qualified name declared in
// another package; it accepts an existing one, qualified or not.
func TestMissingTestNamesCatchesStaleNames(t *testing.T) {
	t.Parallel()
	defs := map[string][]string{"TestGapRetry": {"inbox"}, "Example_quickStart": {"outbox"}}
	docs := map[string]string{"docs/x.md": "proof: `TestGapRetry`, `inbox.TestGapRetry`, Example_quickStart.\n" +
		"stale: `TestGapRetried`\nwrong package: natssink.TestGapRetry\n"}
	got := missingTestNames(docs, defs)
	want := []string{
		"docs/x.md:2: TestGapRetried: no such test function in any *_test.go file",
		"docs/x.md:3: natssink.TestGapRetry: TestGapRetry is declared in package inbox, not natssink",
	}
	if !slices.Equal(got, want) {
		t.Errorf("missingTestNames:\ngot  %q\nwant %q", got, want)
	}
}
