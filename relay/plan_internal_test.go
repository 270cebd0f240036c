package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/internal/sqlq"
	"github.com/outboxkit/outbox/sink/memsink"
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
	// the same plans with no pause, then with an aggregate type and a partition paused
	// (the claims' paused CTE adds filters, which must not turn the plan to a scan)
	for _, pause := range []struct{ name, sql string }{
		{"unpaused", ""},
		{"type and partition paused", `INSERT INTO outbox.pauses (scope, aggregate_type, paused_by, reason) VALUES ('aggregate_type', 'zzz', 't', 'r');
			INSERT INTO outbox.pauses (scope, partition, paused_by, reason) VALUES ('partition', 3, 't', 'r')`},
	} {
		for _, stmt := range strings.Split(pause.sql, ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := pool.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		claimPlans(ctx, t, pool, quoted, pause.name)
	}
}

// claimPlans checks the custom and generic plans of both ordered claims (a subtest each,
// named after state).
func claimPlans(ctx context.Context, t *testing.T, pool *pgxpool.Pool, quoted, state string) {
	for _, name := range []string{"claim_ordered", "claim_ordered_delete"} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(state+"/"+name+"/"+mode, func(t *testing.T) {
				plan := explainClaim(ctx, t, pool, bindClaim(Ordered, name, quoted), mode)
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
	quoted := pendingAccounts(t, pool, 5)
	for _, name := range []string{"claim_ordered", "claim_ordered_delete"} {
		t.Run(name, func(t *testing.T) {
			plan := explainClaim(ctx, t, pool, bindClaim(Ordered, name, quoted), "force_generic_plan")
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
func explainClaim(ctx context.Context, t *testing.T, pool *pgxpool.Pool, claim claimStatement, mode string) string {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE claim") }() // PREPARE outlives the transaction
	types, values := literals(t, claim.args(claimQuery{ordered: &orderedClaim{
		Heads: 100, MaxPerAggregate: 10, MaxEvents: 1000, Partitions: 16, CursorTypes: []string{"account"}, CursorIDs: []string{"a5"},
	}}))
	setup := append([]string{"SET LOCAL plan_cache_mode = " + mode}, claimSettings...) // as the relay plans it
	for _, s := range append(setup, "PREPARE claim("+types+") AS "+claim.sql) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s[:min(len(s), 60)], err)
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE claim("+values+")", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// literals renders a statement's arguments (in $n order) as PREPARE's parameter types
// and EXECUTE's literal values.
func literals(t *testing.T, args []any) (types, values string) {
	t.Helper()
	var ts, vs []string
	for _, a := range args {
		switch v := a.(type) {
		case int64:
			ts, vs = append(ts, "bigint"), append(vs, strconv.FormatInt(v, 10))
		case int:
			ts, vs = append(ts, "int"), append(vs, strconv.Itoa(v))
		case bool:
			ts, vs = append(ts, "boolean"), append(vs, strconv.FormatBool(v))
		case []int:
			ts = append(ts, "int[]")
			if v == nil {
				vs = append(vs, "NULL")
			} else {
				vs = append(vs, "'{"+strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ","), "[]")+"}'")
			}
		case []string:
			ts = append(ts, "text[]")
			if v == nil {
				vs = append(vs, "NULL")
			} else {
				vs = append(vs, "'{"+strings.Join(v, ",")+"}'")
			}
		default:
			t.Fatalf("literals: no literal for %T", a)
		}
	}
	return strings.Join(ts, ", "), strings.Join(vs, ", ")
}

var scanNode = regexp.MustCompile(`Scan using (\w+) on`)

// seqScanOfEvents matches a sequential scan of events in EXPLAIN (FORMAT JSON)'s plan.
var seqScanOfEvents = regexp.MustCompile(`"Node Type": "Seq Scan",[^{}]*"Relation Name": "events"`)

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

// A batch's late rows are settled in work linear in their number, whatever the
// statistics say. The planner estimates "held until this time" at one row (no row held
// that value when the table was analyzed); with that check beside the join, settle_late
// scanned the table and then the parameter list once per held row: 4,992 late rows made
// 25M comparisons, the settle ran past its timeout and the rows went out again. Both
// plans a prepared statement may use, and both retention modes, are checked.
func TestLateSettleWorkIsLinearInItsRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	const rows, held = 20_000, 3_000
	// each row available from its own time, as rows written one by one are
	if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload, available_at)
		SELECT gen_random_uuid(), 'account', 'a' || (g % 1000), 'e', '{}', now() - g * interval '1 millisecond'
		FROM generate_series(1, $1::int) g`, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE outbox.events`); err != nil {
		t.Fatal(err)
	}
	var until time.Time
	if err := pool.QueryRow(ctx, `UPDATE outbox.events SET available_at = now() + interval '1 hour'
		WHERE seq IN (SELECT seq FROM outbox.events ORDER BY seq LIMIT $1) RETURNING available_at`, held).Scan(&until); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	if err := pool.QueryRow(ctx, `SELECT array_agg(seq ORDER BY seq) FROM outbox.events WHERE available_at = $1`, until).Scan(&seqs); err != nil {
		t.Fatal(err)
	}
	seqText, outcomes, errs, delays := make([]string, len(seqs)), make([]string, len(seqs)), make([]string, len(seqs)), make([]string, len(seqs))
	for i, seq := range seqs {
		seqText[i], outcomes[i], errs[i], delays[i] = fmt.Sprint(seq), []string{"published", "retry", "dead", "untouched"}[i%4], "NULL", "1000"
	}
	list := func(vals []string) string { return "'{" + strings.Join(vals, ",") + "}', " }
	args := list(seqText) + list(outcomes) + list(errs) + list(delays) + "'" + until.Format(time.RFC3339Nano) + "', "
	quoted, err := sqlq.QuoteSchema("outbox")
	if err != nil {
		t.Fatal(err)
	}
	// The estimate decides between a hash join and that nested loop by a hair (this
	// table got the hash join, the benchmark's the loop): the statement must be linear
	// with either, so it is also planned with the other joins disabled.
	joins := map[string][]string{"any join": nil, "nested loops only": {"SET LOCAL enable_hashjoin = off", "SET LOCAL enable_mergejoin = off"}}
	for _, deleting := range []bool{false, true} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			for name, settings := range joins {
				t.Run(fmt.Sprintf("delete=%v/%s/%s", deleting, mode, name), func(t *testing.T) {
					plan, work := explainAnalyze(ctx, t, pool, append(settings, "SET LOCAL plan_cache_mode = "+mode), sqlq.Bind[lateSettle]("settle_late", quoted).SQL,
						"bigint[], text[], text[], bigint[], timestamptz, boolean", args+fmt.Sprint(deleting))
					if limit := int64(rows + 20*held); work > limit {
						t.Errorf("settling %d late rows of %d took %d row visits (limit %d); plan:\n%s", held, rows, work, limit, plan)
					}
				})
			}
		}
	}
}

// explainAnalyze runs sql (prepared with parameter types types after the settings,
// executed with the literal arguments args) through EXPLAIN ANALYZE in a
// transaction that is rolled back, and returns the plan and its work: the rows every
// node returned or filtered out, over all its loops.
func explainAnalyze(ctx context.Context, t *testing.T, pool *pgxpool.Pool, settings []string, sql, types, args string) (string, int64) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE q") }() // PREPARE outlives the transaction
	for _, s := range append(settings, "PREPARE q("+types+") AS "+sql) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s[:min(len(s), 60)], err)
		}
	}
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) EXECUTE q("+args+")", pgx.QueryExecModeSimpleProtocol).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var doc []struct{ Plan planNode }
	if err := json.Unmarshal(out, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	return string(out), doc[0].Plan.work()
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan; the removed counts are per loop.
type planNode struct {
	ActualRows    float64    `json:"Actual Rows"`
	ActualLoops   float64    `json:"Actual Loops"`
	RemovedFilter float64    `json:"Rows Removed by Filter"`
	RemovedJoin   float64    `json:"Rows Removed by Join Filter"`
	Plans         []planNode `json:"Plans"`
}

func (n planNode) work() int64 {
	w := int64((n.ActualRows + n.RemovedFilter + n.RemovedJoin) * n.ActualLoops)
	for _, c := range n.Plans {
		w += c.work()
	}
	return w
}

// The fence (fence.sql) of a relay that holds a few of many partitions, as each of
// several relays does, must run on its generic plan. Left to plan_cache_mode auto, the
// server estimated its custom plan cheaper for a short partition list and planned it
// afresh on every batch: in the isolation benchmark's four-relay flood, 4,131 plans
// for 4,124 fences, 0.15 ms each, more than the fence's own run.
func TestFenceRunsOnItsGenericPlan(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	r, err := New(pool, &memsink.Sink{}, &Config{Mode: Ordered, Partitions: 16, Wakeup: WakeupPoll, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b := r.batches
	parts, epochs := []int{4, 5, 6, 7}, []int64{3, 3, 3, 3} // a quarter: one of four relays
	if _, err := pool.Exec(ctx, `INSERT INTO outbox.leases (partition, owner, epoch, expires_at)
		SELECT p, CASE WHEN p = ANY($2::int[]) THEN $1 ELSE 'another relay' END, 3, 'infinity' FROM generate_series(0, 15) p`, b.owner, parts); err != nil {
		t.Fatal(err)
	}
	const batches = 12
	tx, err := b.begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.end()
	for range batches {
		// begun as a claim begins it, with the claim transaction's settings
		rows, done, err := b.claimRows(ctx, tx, "SELECT 1", nil)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
		done()
		if _, fenced, err := b.commit(ctx, tx, nil, parts, epochs, false); err != nil || fenced {
			t.Fatalf("commit: fenced %v, %v", fenced, err)
		}
	}
	var generic, custom int64
	if err := tx.conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		b.q.fence.SQL).Scan(&generic, &custom); err != nil {
		t.Fatalf("the fence's prepared statement: %v", err)
	}
	if custom > 0 || generic != batches {
		t.Errorf("%d fences: %d on the generic plan, %d planned afresh; want every one on the generic plan", batches, generic, custom)
	}
}

// A claim scoped to some of the partitions (one of several relays) reads every relay's
// pending rows. While a few hundred are pending, as under a flood the relays keep up with,
// it finds its heads among them in seq order: discovery walked every pending aggregate,
// about four for every head kept with four relays, and that walk was most of a claim's
// cost (bench/RESULTS.md). An unscoped claim still discovers past 64 pending rows; the
// scoped one takes every head of its partitions either way.
func TestScopedClaimFindsItsHeadsAmongThePendingRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	quoted := pendingAccounts(t, pool, 300)
	quarter := []int{0, 1, 2, 3}
	var inScope int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox.events WHERE partition * 16 / 4096 = ANY($1)`, quarter).Scan(&inScope); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		scope      []int
		discovered int // rows of the CTE types: 0 when the heads were found among near's rows
		claimed    int64
	}{
		{"scoped", quarter, 0, inScope},
		{"unscoped", nil, 1, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			claim := bindClaim(Ordered, "claim_ordered", quoted)
			types, values := literals(t, claim.args(claimQuery{ordered: &orderedClaim{
				Scope: c.scope, Heads: 100, MaxPerAggregate: 10, MaxEvents: 1000, Partitions: 16,
			}}))
			plan, _ := explainAnalyze(ctx, t, pool, claimSettings, claim.sql, types, values)
			var doc []struct{ Plan namedNode }
			if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) != 1 {
				t.Fatalf("EXPLAIN output: %v", err)
			}
			top := doc[0].Plan
			discovered := top.find("CTE types")
			if discovered == nil {
				t.Fatalf("no CTE types in the plan:\n%s", plan)
			}
			if int(discovered.ActualRows) != c.discovered {
				t.Errorf("discovery found %v types, want %d; plan:\n%s", discovered.ActualRows, c.discovered, plan)
			}
			if int64(top.ActualRows) != c.claimed {
				t.Errorf("the claim took %v rows, want %d (300 pending, one an aggregate, %d in scope)", top.ActualRows, c.claimed, inScope)
			}
		})
	}
}

// namedNode is a node of EXPLAIN (FORMAT JSON)'s plan with its subplan's name.
type namedNode struct {
	SubplanName string      `json:"Subplan Name"`
	ActualRows  float64     `json:"Actual Rows"`
	Plans       []namedNode `json:"Plans"`
}

// find returns the node of the subplan named name, or nil.
func (n *namedNode) find(name string) *namedNode {
	if n.SubplanName == name {
		return n
	}
	for i := range n.Plans {
		if f := n.Plans[i].find(name); f != nil {
			return f
		}
	}
	return nil
}

// pendingAccounts writes n pending events, one for each of the aggregates account/a1 …
// account/an, and returns the quoted schema the claims are bound to.
func pendingAccounts(t *testing.T, pool *pgxpool.Pool, n int) string {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
		SELECT gen_random_uuid(), 'account', 'a' || g, 'e', '{}' FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatal(err)
	}
	quoted, err := sqlq.QuoteSchema("outbox")
	if err != nil {
		t.Fatal(err)
	}
	return quoted
}

// A lane's probe (Config.IsolatedTypes, ADR 0039; a type its rate holds back, ADR 0040)
// reads the pending rows of its own types only: it walked 1,000 rows of the other lane's
// flood at every wake-up, and answered yes whatever they were. Behind 5,000 pending rows
// of one type and one row of another, each lane's probe answers from a few rows, on its
// custom plan and on its generic one (the floor's own reads are a few hundred).
func TestLaneProbeReadsOnlyItsLane(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	for _, sql := range []string{
		`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
		 SELECT gen_random_uuid(), 'flood', 'f' || (g % 500), 'e', '{}' FROM generate_series(1, 5000) g`,
		`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'quiet', 'q', 'e', '{}')`,
		`ANALYZE outbox.events`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	quoted, err := sqlq.QuoteSchema("outbox")
	if err != nil {
		t.Fatal(err)
	}
	probe := sqlq.Bind[probeParams]("probe", quoted)
	for _, c := range []struct {
		name       string
		only, skip []string
		ready      bool
	}{
		{"the others' lane", nil, []string{"flood"}, true},
		{"the isolated lane", []string{"flood"}, nil, true},
		{"the isolated lane, its type held back by its rate", []string{"flood"}, []string{"flood"}, false},
		{"the others' lane, every type held back", nil, []string{"flood", "quiet"}, false},
	} {
		p := probeParams{Partitions: 16, OnlyTypes: c.only, SkipTypes: c.skip}
		var ready bool
		if err := pool.QueryRow(ctx, "SELECT ready FROM ("+probe.SQL+") p(ready)", probe.Args(&p)...).Scan(&ready); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ready != c.ready {
			t.Errorf("%s: ready %v, want %v", c.name, ready, c.ready)
		}
		types, values := literals(t, probe.Args(&p))
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan, work := explainAnalyze(ctx, t, pool, []string{"SET LOCAL plan_cache_mode = " + mode}, probe.SQL, types, values)
			if work > 600 || seqScanOfEvents.MatchString(plan) {
				t.Errorf("%s, %s: the probe handled %d rows; plan:\n%s", c.name, mode, work, plan)
			}
		}
	}
}
