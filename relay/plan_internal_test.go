package relay

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// After a large backlog is drained and ANALYZE runs before VACUUM, the planner believes
// the pending indexes empty. The ordered claim must still find each head's predecessors
// through events_pending_aggregate (an index condition on the aggregate): through
// events_pending, each probe walked the drained rows' dead entries (2.1 s for a claim of
// 1,000 rows behind 1M drained ones; migration 0003, ADR 0002). Both plans a prepared
// statement may use are checked: the custom plan and the generic one pgx's statement
// cache switches to.
func TestOrderedClaimPlanAfterDrainedBacklog(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	for _, sql := range []string{
		`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
		 SELECT gen_random_uuid(), 'account', 'a' || (g % 100), 'e', '{}' FROM generate_series(1, 20000) g`,
		`UPDATE outbox.events SET published_at = now()`, // drained, not vacuumed
		`ANALYZE outbox.events`,
		`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
		 SELECT gen_random_uuid(), 'account', 'a' || g, 'e', '{}' FROM generate_series(1, 100) g`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	quoted, err := sqlq.QuoteSchema("outbox")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"claim_ordered", "claim_ordered_delete"} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				plan := explainClaim(ctx, t, pool, sqlq.Query(name, quoted), mode)
				if bad := probesThroughPending(plan); len(bad) > 0 {
					t.Errorf("per-aggregate probes scan events_pending:\n%s\n\nplan:\n%s", strings.Join(bad, "\n"), plan)
				}
				if strings.Contains(plan, "Seq Scan on events") {
					t.Errorf("a sequential scan of events; plan:\n%s", plan)
				}
				if !lockedByTID(plan) {
					t.Errorf("the lock step does not lock by TID scan (an index scan there reads the drained rows' dead entries on every claim); plan:\n%s", plan)
				}
			})
		}
	}
}

// lockedByTID reports whether the plan's LockRows (the claim's lock step) reads the
// picked rows by TID scan.
func lockedByTID(plan string) bool {
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "LockRows") {
			continue
		}
		for _, next := range lines[i+1:] {
			switch {
			case strings.Contains(next, "Tid Scan on events"):
				return true
			case strings.Contains(next, "Scan using") || strings.Contains(next, "Seq Scan"):
				return false
			}
		}
	}
	return false
}

// A relay's prepared claim gets its generic plan after a few executions, often while
// the table is small (a fresh schema, no statistics). That plan is kept as the table
// grows, so it must not scan the table: a lock step written so that no partial index
// could serve it became a sequential scan there, and at 2,000 events/s the p99 latency
// went from 24 to 91 ms as the published rows piled up.
func TestOrderedClaimGenericPlanFromASmallTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
		SELECT gen_random_uuid(), 'account', 'a' || g, 'e', '{}' FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	quoted, err := sqlq.QuoteSchema("outbox")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"claim_ordered", "claim_ordered_delete"} {
		t.Run(name, func(t *testing.T) {
			plan := explainClaim(ctx, t, pool, sqlq.Query(name, quoted), "force_generic_plan")
			if strings.Contains(plan, "Seq Scan on events") {
				t.Errorf("the generic plan scans the table; plan:\n%s", plan)
			}
			if !lockedByTID(plan) {
				t.Errorf("the generic plan's lock step does not lock by TID scan; plan:\n%s", plan)
			}
		})
	}
}

// explainClaim returns EXPLAIN's text for an ordered claim of 100 heads over all
// partitions, planned with the relay's claim settings under plan_cache_mode mode, in a
// transaction that is rolled back.
func explainClaim(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql, mode string) string {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE claim") }()                         // PREPARE outlives the transaction
	setup := append([]string{"SET LOCAL plan_cache_mode = " + mode}, claimSettings...) // as the relay plans it
	for _, s := range append(setup, "PREPARE claim(bigint, bigint, int[], int, int, text[], int, int, text[], text[]) AS "+sql) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s[:min(len(s), 60)], err)
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE claim(0, 0, NULL, 100, 10, NULL, 1000, 16, '{account}', '{a5}')", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

var scanNode = regexp.MustCompile(`Scan using (\w+) on`)

// probesThroughPending returns the scans of events_pending that filter on the
// aggregate: a per-aggregate probe walking the pending rows in seq order.
func probesThroughPending(plan string) []string {
	var bad []string
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		m := scanNode.FindStringSubmatch(l)
		if m == nil || m[1] != "events_pending" {
			continue
		}
		for _, next := range lines[i+1:] {
			if strings.Contains(next, "->") {
				break
			}
			if strings.Contains(next, "aggregate_id =") {
				bad = append(bad, strings.TrimSpace(l)+" / "+strings.TrimSpace(next))
			}
		}
	}
	return bad
}
