package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemoWithoutPostgresBinaries: with no DATABASE_URL and no server binaries, the
// demo fails at once with a message naming the package to install.
func TestDemoWithoutPostgresBinaries(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := postgresBinGlob
	postgresBinGlob = t.TempDir() + "/*/bin"
	t.Cleanup(func() { postgresBinGlob = old })
	var out, errOut bytes.Buffer
	code := Main(t.Context(), []string{"demo", "--duration", "1s"}, IO{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != ExitFailure {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, ExitFailure, out.String(), errOut.String())
	}
	for _, want := range []string{"no PostgreSQL server binaries", "apt install postgresql", "--database-url"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
}
