package sqlq

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestBindNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, out, names, err string }{
		{in: "SELECT @a::int, @b_2, @a", out: "SELECT $1::int, $2, $1", names: "a b_2"},
		{in: "-- @not a parameter, nor $1\nSELECT @x", out: "-- @not a parameter, nor $1\nSELECT $1", names: "x"},
		{in: `SELECT '@in a string', "@col", 'it''s @no' FROM t WHERE j @> @filter`, out: `SELECT '@in a string', "@col", 'it''s @no' FROM t WHERE j @> $1`, names: "filter"},
		{in: "SELECT @x -- a trailing @comment", out: "SELECT $1 -- a trailing @comment", names: "x"},
		{in: "SELECT $1, @x", err: "positional parameter at byte 7"},
		{in: "SELECT 'open", err: "unterminated '"},
	} {
		out, names, err := bindNames(c.in)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("bindNames(%q): error %v, want one containing %q", c.in, err, c.err)
			}
		case err != nil:
			t.Errorf("bindNames(%q): %v", c.in, err)
		case out != c.out || strings.Join(names, " ") != c.names:
			t.Errorf("bindNames(%q) = %q, %q; want %q, %q", c.in, out, names, c.out, c.names)
		}
	}
}

// enqueueConflictsParams mirrors the parameters of enqueue_conflicts.sql (@ids), the
// smallest named statement.
type enqueueConflictsParams struct {
	IDs string `sql:"ids"`
}

func TestBindArgsFollowTheNames(t *testing.T) {
	t.Parallel()
	s := Bind[enqueueConflictsParams]("enqueue_conflicts", `"outbox"`)
	if strings.Contains(s.SQL, "@ids::json") || !strings.Contains(s.SQL, "json_array_elements_text($1::json)") {
		t.Fatalf("@ids not bound to $1:\n%s", s.SQL)
	}
	if got := s.Args(&enqueueConflictsParams{IDs: `["x"]`}); fmt.Sprint(got) != `[["x"]]` {
		t.Fatalf("args %v", got)
	} // A query kept elsewhere (a command's own files) binds the same way.
	if s := BindText[enqueueConflictsParams]("elsewhere", "SELECT @ids::json, @ids"); s.SQL != "SELECT $1::json, $1" {
		t.Fatalf("BindText: %q", s.SQL)
	}
}

// A struct field tagged ,inline stands for its fields: statements that share columns
// share their struct.
func TestBindInlinesAStruct(t *testing.T) {
	t.Parallel()
	type shared struct {
		IDs string `sql:"ids"`
	}
	type outer struct {
		Shared shared `sql:",inline"`
	}
	s := Bind[outer]("enqueue_conflicts", `"outbox"`)
	if got := s.Args(&outer{Shared: shared{IDs: `["y"]`}}); fmt.Sprint(got) != `[["y"]]` {
		t.Fatalf("args %v", got)
	}
}

// Bind refuses a struct that does not match its query by name, whichever side is wrong.
func TestBindRefusesAMismatch(t *testing.T) {
	t.Parallel()
	type unknown struct {
		ID string `sql:"id"` // the query names @ids
	}
	type extra struct {
		IDs  string `sql:"ids"`
		More string `sql:"more"`
	}
	type untagged struct {
		IDs string
	}
	type embedded struct {
		enqueueConflictsParams // an embedded struct is not inlined without the tag
	}
	type twice struct {
		IDs    string                 `sql:"ids"`
		Shared enqueueConflictsParams `sql:",inline"`
	}
	type inlineScalar struct {
		IDs string `sql:",inline"`
	}
	for name, bind := range map[string]func(){
		"a parameter names no field":  func() { Bind[unknown]("enqueue_conflicts", `"outbox"`) },
		"a field is not used":         func() { Bind[extra]("enqueue_conflicts", `"outbox"`) },
		"a field has no tag":          func() { Bind[untagged]("enqueue_conflicts", `"outbox"`) },
		"an untagged embedded struct": func() { Bind[embedded]("enqueue_conflicts", `"outbox"`) },
		"a name twice, once inlined":  func() { Bind[twice]("enqueue_conflicts", `"outbox"`) },
		"an inlined scalar":           func() { Bind[inlineScalar]("enqueue_conflicts", `"outbox"`) },
		"a positional query":          func() { BindText[enqueueConflictsParams]("positional", "SELECT $1") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Bind did not panic", name)
				}
			}()
			bind()
		}()
	}
}

// Every query file has a Go user (outside tests) that names it with a string literal (or
// is a part another query includes), so a search for its name finds who runs it: a name
// built by concatenation ("claim_ordered" + "_delete") fails here.
func TestEveryQueryNamedByALiteral(t *testing.T) {
	t.Parallel()
	literals := map[string]bool{}
	var concatenated []string // string literals in a + expression, "file:line: text"
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		// Tests name queries in their checks, and internal/sqlq's files only read them:
		// neither counts as a user (but neither may concatenate a name).
		user := !strings.HasSuffix(path, "_test.go") && filepath.Dir(path) != filepath.Join(root, "internal", "sqlq")
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if bin, ok := n.(*ast.BinaryExpr); ok && bin.Op == token.ADD {
				for _, side := range []ast.Expr{bin.X, bin.Y} {
					if lit, ok := side.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil {
							concatenated = append(concatenated, fmt.Sprintf("%s: %s", fset.Position(lit.Pos()), s))
						}
					}
				}
			}
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && user {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					literals[s] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := files.ReadDir("queries")
	if err != nil {
		t.Fatal(err)
	}
	included := map[string]bool{}
	for _, e := range entries {
		b, err := files.ReadFile("queries/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range include.FindAllStringSubmatch(string(b), -1) {
			included[m[1]] = true
		}
	}
	var unnamed []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		if !literals[name] && !included[name] {
			unnamed = append(unnamed, name)
		}
		for _, c := range concatenated {
			_, frag, _ := strings.Cut(c, ": ")
			if frag != "" && (strings.HasPrefix(name, frag+"_") || strings.HasSuffix(name, "_"+strings.TrimPrefix(frag, "_")) && strings.HasPrefix(frag, "_")) {
				t.Errorf("%s: a fragment of query name %s in a concatenation", c, name)
			}
		}
	}
	slices.Sort(unnamed)
	if len(unnamed) > 0 {
		t.Errorf("no Go code outside internal/sqlq names these queries with a string literal (built by concatenation, or unused?): %s", strings.Join(unnamed, ", "))
	}
}

// Every query names its parameters: none is left with a positional $n (which Bind
// refuses), so the SQL and the Go that fills it meet by name everywhere.
func TestEveryQueryBindsByName(t *testing.T) {
	t.Parallel()
	entries, err := files.ReadDir("queries")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		if _, _, err := bindNames(text(name)); err != nil {
			t.Errorf("%s.sql: %v", name, err)
		}
	}
}
