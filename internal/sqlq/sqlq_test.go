package sqlq

import (
	"strings"
	"testing"
)

func TestIncludesExpanded(t *testing.T) {
	t.Parallel()
	entries, err := files.ReadDir("queries")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		if q := Query(name, `"outbox"`); strings.Contains(q, "{{") {
			rest := q[strings.Index(q, "{{"):]
			t.Errorf("%s: a directive is left: %q", name, rest[:min(len(rest), 40)])
		}
	}
	q := Query("claim_ordered_delete", `"outbox"`)
	if !strings.Contains(q, `bound AS MATERIALIZED`) || !strings.Contains(q, `claimed AS MATERIALIZED`) || !strings.HasSuffix(strings.TrimSpace(q), "(SELECT types FROM shares_full)") {
		t.Fatalf("claim_ordered_delete does not hold the shared part and its own end:\n%s", q)
	}
	// a part's part: claim_ordered_pick includes pending_types
	if !strings.Contains(q, "),\ntypes AS (") {
		t.Fatalf("claim_ordered_delete does not hold pending_types, included by claim_ordered_pick:\n%s", q)
	}
}
