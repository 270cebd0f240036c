package outbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A pool (or a plain connection) must not be accepted where Enqueue wants the
// caller's transaction: this test asks the compiler.
func TestPoolDoesNotCompile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a program")
	}
	dir, err := os.MkdirTemp("internal", "_compilecheck")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := `package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
)

func main() {
	var pool *pgxpool.Pool
	_ = outbox.Enqueue(context.Background(), outbox.PgxTx(pool))
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
	if err == nil {
		t.Fatal("passing a *pgxpool.Pool to outbox.PgxTx compiled")
	}
	if !strings.Contains(string(out), "does not implement pgx.Tx") {
		t.Fatalf("unexpected compiler output:\n%s", out)
	}
}
