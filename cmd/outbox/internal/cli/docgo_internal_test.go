package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// A ```go block in the README or docs/ is compiled against this module (which requires
// the root module and every sink module) as it is written. The line before its fence
// (blank lines aside) is a hidden marker saying how:
//
//	<!-- go: func(ctx context.Context, pool *pgxpool.Pool) error -->
//	    the block is the body of a function of that signature: its parameters are the
//	    names the block uses without declaring them. Names it declares at its top level
//	    and does not use again are used after it, and the function needs no return
//	    at its end.
//	<!-- go: decl -->   the block is top-level declarations (types, funcs, vars).
//	<!-- go: file -->   the block is a whole file, package clause and imports included.
//	<!-- go: not compiled: <reason> -->   the block is not Go (pseudo-code, output).
//
// In func and decl blocks, the packages the block (and the signature) names are
// imported for it: the ones of goBlockImports. A block without a marker fails the test.
var goMarker = regexp.MustCompile(`^\s*<!--\s*go:\s*(.*?)\s*-->\s*$`)

// goBlockImports are the packages a func or decl block may name without importing
// them, by the name it uses.
var goBlockImports = map[string]string{
	"context":       "context",
	"errors":        "errors",
	"fmt":           "fmt",
	"http":          "net/http",
	"json":          "encoding/json",
	"log":           "log",
	"os":            "os",
	"slog":          "log/slog",
	"sql":           "database/sql",
	"time":          "time",
	"uuid":          "github.com/google/uuid",
	"pgx":           "github.com/jackc/pgx/v5",
	"pgconn":        "github.com/jackc/pgx/v5/pgconn",
	"pgxpool":       "github.com/jackc/pgx/v5/pgxpool",
	"outbox":        "github.com/outboxkit/outbox",
	"inbox":         "github.com/outboxkit/outbox/inbox",
	"outboxadmin":   "github.com/outboxkit/outbox/outboxadmin",
	"outboxmigrate": "github.com/outboxkit/outbox/outboxmigrate",
	"outboxtest":    "github.com/outboxkit/outbox/outboxtest",
	"relay":         "github.com/outboxkit/outbox/relay",
	"httpsink":      "github.com/outboxkit/outbox/sink/httpsink",
	"jsonlsink":     "github.com/outboxkit/outbox/sink/jsonlsink",
	"memsink":       "github.com/outboxkit/outbox/sink/memsink",
	"outboxotel":    "github.com/outboxkit/outbox/outboxotel",
	"amqpsink":      "github.com/outboxkit/outbox/sink/amqpsink",
	"amqp":          "github.com/rabbitmq/amqp091-go",
	"kafkasink":     "github.com/outboxkit/outbox/sink/kafkasink",
	"kgo":           "github.com/twmb/franz-go/pkg/kgo",
	"natssink":      "github.com/outboxkit/outbox/sink/natssink",
	"nats":          "github.com/nats-io/nats.go",
	"jetstream":     "github.com/nats-io/nats.go/jetstream",
	"redissink":     "github.com/outboxkit/outbox/sink/redissink",
	"redis":         "github.com/redis/go-redis/v9",
	"sqssink":       "github.com/outboxkit/outbox/sink/sqssink",
	"sqs":           "github.com/aws/aws-sdk-go-v2/service/sqs",
	"aws":           "github.com/aws/aws-sdk-go-v2/aws",
}

// goBlock is one ```go block to compile: where it is (file:line of its first line),
// how it is wrapped, and its lines.
type goBlock struct {
	file   string // as the compiler's errors name it: README.md, docs/inbox.md
	line   int    // of the block's first line
	marker int    // the marker's line
	mode   string // file, decl or a func signature
	lines  []string
}

// goBlocks returns the ```go blocks of the document text named file, with their
// markers; problems lists the blocks without a marker, or with a bad one.
func goBlocks(file, text string) (blocks []goBlock, problems []string) {
	lines := strings.Split(text, "\n")
	for _, b := range parseDoc(file, text).blocks {
		if b.lang != "go" {
			continue
		}
		fence := b.line - 1 // 1-based line of the fence
		mi := fence - 2     // 0-based index of the line before it
		for mi >= 0 && strings.TrimSpace(lines[mi]) == "" {
			mi--
		}
		var m []string
		if mi >= 0 {
			m = goMarker.FindStringSubmatch(lines[mi])
		}
		if m == nil {
			problems = append(problems, fmt.Sprintf("%s:%d: a ```go block needs a marker line before its fence: <!-- go: func(…) …|decl|file|not compiled: reason -->", file, fence))
			continue
		}
		mode := m[1]
		switch {
		case strings.HasPrefix(mode, "not compiled:"):
			if strings.TrimSpace(strings.TrimPrefix(mode, "not compiled:")) == "" {
				problems = append(problems, fmt.Sprintf("%s:%d: <!-- go: not compiled: … --> needs its reason", file, mi+1))
			}
			continue
		case mode == "file", mode == "decl", strings.HasPrefix(mode, "func("):
		default:
			problems = append(problems, fmt.Sprintf("%s:%d: unknown go block marker %q: want func(…) …, decl, file or not compiled: reason", file, mi+1, mode))
			continue
		}
		blocks = append(blocks, goBlock{file: file, line: b.line, marker: mi + 1, mode: mode, lines: b.lines})
	}
	return blocks, problems
}

// source returns the Go file that compiles b as package pkg, with line directives
// that make the compiler's errors name the document's lines.
func (b goBlock) source(pkg string) string {
	body := strings.Join(b.lines, "\n") + "\n"
	if b.mode == "file" {
		return fmt.Sprintf("//line %s:%d\n%s", b.file, b.line, body)
	}
	var code strings.Builder
	switch b.mode {
	case "decl":
		fmt.Fprintf(&code, "//line %s:%d\n%s", b.file, b.line, body)
	default: // a func signature
		sig := strings.TrimPrefix(b.mode, "func")
		fmt.Fprintf(&code, "//line %s:%d\nfunc _%s {\n//line %s:%d\n%s", b.file, b.marker, sig, b.file, b.line, body)
		for _, name := range topLevelNames(sig, body) {
			fmt.Fprintf(&code, "_ = %s\n", name)
		}
		code.WriteString("panic(\"compiled, not run\")\n}\n")
	}
	var imports []string
	for _, name := range namedPackages(code.String()) {
		imports = append(imports, fmt.Sprintf("\t%q\n", goBlockImports[name]))
	}
	return fmt.Sprintf("package %s\n\nimport (\n%s)\n\n%s", pkg, strings.Join(imports, ""), code.String())
}

// topLevelNames returns the variables body (a function body of signature sig) declares
// at its top level, to be used after it: a doc fragment's `r, err := …` may be the
// reader's to use next. A body that does not parse declares none: the compiler
// reports it, at the document's line.
func topLevelNames(sig, body string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _"+sig+" {\n"+body+"\n}\n", parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	if len(f.Decls) == 0 {
		return nil
	}
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" && !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, spec := range gd.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return names
}

// namedPackages returns the names of goBlockImports that code uses as a package
// (pkg.Name), sorted. Of code that does not parse, the part that does counts (the
// compiler reports the rest without undefined packages besides).
func namedPackages(code string) []string {
	f, _ := parser.ParseFile(token.NewFileSet(), "", "package p\n"+code, parser.SkipObjectResolution)
	if f == nil {
		return nil
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && goBlockImports[id.Name] != "" && !slices.Contains(names, id.Name) {
				names = append(names, id.Name)
			}
		}
		return true
	})
	slices.Sort(names)
	return names
}

// buildGoBlocks compiles blocks with one go build in this module, each block a package
// of its own under internal/docblocks that exists only in an overlay (nothing is
// written into the module). It returns the build's output and error.
func buildGoBlocks(t *testing.T, blocks []goBlock) (string, error) {
	t.Helper()
	module, err := filepath.Abs("../..") // cmd/outbox
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		pkg := fmt.Sprintf("block%03d", i)
		src := b.source(pkg)
		file := filepath.Join(tmp, pkg+".go")
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(module, "internal", "docblocks", pkg, "block.go")] = file
		pkgs = append(pkgs, "./internal/docblocks/"+pkg)
	}
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// -gcflags=-e: every error of a block, not the first ten.
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-overlay", ovFile, "-gcflags=-e"}, pkgs...)...)
	cmd.Dir = module
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// docMarkdown returns README.md and every docs/**/*.md, by the path the compiler's
// errors name them (relative to the repository).
func docMarkdown(t *testing.T) map[string]string {
	t.Helper()
	docs := map[string]string{}
	read := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.ToSlash(rel)] = string(b)
	}
	read(filepath.Join(repoRoot, "README.md"))
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			read(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// Every ```go block of the README and docs/ compiles against the real packages (or
// says why it is not Go): an API change that leaves a snippet behind fails here.
func TestDocGoBlocksCompile(t *testing.T) {
	t.Parallel()
	docs := docMarkdown(t)
	var blocks []goBlock
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		bs, problems := goBlocks(name, docs[name])
		for _, p := range problems {
			t.Error(p)
		}
		blocks = append(blocks, bs...)
	}
	if len(blocks) < 5 {
		t.Fatalf("found only %d ```go blocks to compile in README.md and docs/: the README alone has 2", len(blocks))
	}
	out, err := buildGoBlocks(t, blocks)
	if err != nil {
		t.Errorf("the docs' go blocks do not compile (%v):\n%s", err, out)
	}
	for _, b := range blocks {
		t.Logf("compiled %s:%d (%s)", b.file, b.line, b.mode)
	}
}

// The check refuses a block without a marker or a reason, and a block that does not
// compile fails the build with an error naming the document's line, while a correct
// block next to it passes.
func TestDocGoBlocksCatchDrift(t *testing.T) {
	t.Parallel()
	doc := "# x\n\n" +
		"<!-- go: func(ctx context.Context, pool *pgxpool.Pool) error -->\n" + // 3
		"```go\n" +
		"r, err := relay.New(pool, &memsink.Sink{}, nil)\n" + // 5
		"if err != nil {\n\treturn err\n}\n" +
		"```\n\n" +
		"<!-- go: func(ctx context.Context, pool *pgxpool.Pool) error -->\n" + // 11
		"```go\n" +
		"return outbox.Enqueue(ctx, pool, outbox.Event{EventType: \"x\"})\n" + // 13: a pool is no Tx
		"```\n\n" +
		"```go\n" + // 16: no marker
		"x := 1\n```\n\n" +
		"<!-- go: not compiled: -->\n" + // 20: no reason
		"```go\n…\n```\n\n" +
		"<!-- go: not compiled: pseudo-code -->\n" +
		"```go\nfor each event { publish }\n```\n"
	blocks, problems := goBlocks("docs/drift.md", doc)
	wantProblems := []string{
		"docs/drift.md:16: a ```go block needs a marker line before its fence: <!-- go: func(…) …|decl|file|not compiled: reason -->",
		"docs/drift.md:20: <!-- go: not compiled: … --> needs its reason",
	}
	if !slices.Equal(problems, wantProblems) {
		t.Errorf("problems:\ngot  %q\nwant %q", problems, wantProblems)
	}
	if len(blocks) != 2 {
		t.Fatalf("got %d blocks to compile, want 2: %+v", len(blocks), blocks)
	}
	out, err := buildGoBlocks(t, blocks)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("go build of a broken block: err = %v, want a failed build\n%s", err, out)
	}
	if !strings.Contains(out, "docs/drift.md:13:") {
		t.Errorf("the build's errors do not name the broken line docs/drift.md:13:\n%s", out)
	}
	if strings.Contains(out, "docs/drift.md:5:") || strings.Contains(out, "docs/drift.md:6:") {
		t.Errorf("the correct block failed too:\n%s", out)
	}
}
