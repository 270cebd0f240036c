package outbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The root module is what users import into their transaction code: it may depend on
// the standard library, pgx (with what pgx itself needs), pglogrepl and a UUID package,
// and nothing else — no broker clients, no metrics or tracing SDKs.
func TestRootModuleDependencies(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := []string{
		"github.com/outboxkit/outbox",
		"github.com/jackc/pgx/v5", "github.com/jackc/pglogrepl",
		"github.com/jackc/pgpassfile", "github.com/jackc/pgservicefile", "github.com/jackc/puddle/v2", // pgx's own
		"golang.org/x/text", "golang.org/x/sync", // pgx's own
		"github.com/google/uuid",
	}
	for _, pkg := range strings.Fields(string(out)) {
		ok := false
		for _, a := range allowed {
			if pkg == a || strings.HasPrefix(pkg, a+"/") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("root module depends on %s: only stdlib, pgx, pglogrepl and uuid are allowed", pkg)
		}
	}
}

// Every package has a doc comment.
func TestEveryPackageHasDocComment(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Doc}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, doc, _ := strings.Cut(line, "\t")
		if strings.TrimSpace(doc) == "" {
			t.Errorf("package %s has no doc comment", pkg)
		}
	}
}
