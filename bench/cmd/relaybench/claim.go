package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
)

// claimPending is the number of pending rows claimed behind a large table; claimTrickle
// the number pending under a steady trickle (a few per claim); claimTrickleLag the rows
// drained above the relay's floor under that trickle (2 s at 500 events/s).
const (
	claimPending    = 1000
	claimTrickle    = 5
	claimTrickleLag = 1000
	// claimFlood: pending rows of a flood the relay keeps up with (scenario e)
	claimFlood = 200
)

// claimQuery is one statement to explain, with the literal arguments of its EXECUTE.
type claimQuery struct {
	label, file, args string
	show              bool // print the full plans
}

// claimScenario is a table state and the statements explained in it.
type claimScenario struct {
	key, name string
	prepare   func(ctx context.Context) error
	queries   []claimQuery
}

// claimMeasure is one EXPLAIN ANALYZE.
type claimMeasure struct {
	scenario, query, run string
	sum                  planSummary
	plan                 []string
	show                 bool
}

// claimRuns are the executions of every statement, each in its own rolled-back
// transaction: two with a custom plan (the second shows what the first left behind,
// e.g. killed index entries) and one with the generic plan a prepared statement (as
// pgx caches them) settles on after five executions.
var claimRuns = []struct{ name, mode string }{
	{"custom #1", "force_custom_plan"},
	{"custom #2", "force_custom_plan"},
	{"generic", "force_generic_plan"},
}

func (b *bench) claim(ctx context.Context) (partReport, error) {
	n, batch, mpa := b.o.claimRows, b.o.batch, b.o.maxPerAggregate
	maxEvents := min(batch*mpa, 10000) // the relay's default MaxBatchEvents
	ordered := func(show bool) claimQuery {
		return claimQuery{"ordered claim", "claim_ordered", fmt.Sprintf("0, 0, NULL, %d, %d, NULL, %d, 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL", batch, mpa, maxEvents), show}
	}
	unordered := claimQuery{"unordered claim", "claim_unordered", fmt.Sprintf("0, 0, %d", batch), false}
	orderedQuarter := claimQuery{ // relay partitions 0-3 of 16: relay 1 of 4
		"ordered claim, 1 of 4 relays", "claim_ordered",
		fmt.Sprintf("0, 0, '{0,1,2,3}'::int[], %d, %d, NULL, %d, 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL", batch, mpa, maxEvents), true,
	}
	orderedDelete := claimQuery{
		"ordered claim, delete-on-publish", "claim_ordered_delete",
		fmt.Sprintf("0, 0, NULL, %d, %d, NULL, %d, 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL", batch, mpa, maxEvents), false,
	}
	exec := func(qs ...string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			for _, q := range qs {
				if _, err := b.pool.Exec(ctx, q); err != nil {
					return fmt.Errorf("%s: %w", q, err)
				}
			}
			return nil
		}
	}
	fill := func(rows int, published bool) func(ctx context.Context) error {
		return func(ctx context.Context) error { return benchdb.Fill(ctx, b.pool, rows, b.o.aggregates, published) }
	}
	steps := func(fs ...func(ctx context.Context) error) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if err := benchdb.ResetOutbox(ctx, b.pool); err != nil {
				return err
			}
			for _, f := range fs {
				if err := f(ctx); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// setFloor sets the floor the relay would have in a trickle after a drained backlog:
	// the lowest pending seq of a sealed observation, a second or two old
	// (relay/floor.go), with the claimTrickleLag rows drained since then above it.
	var floor int64
	setFloor := func(ctx context.Context) error {
		if err := b.pool.QueryRow(ctx, "SELECT min(seq) FROM outbox.events WHERE published_at IS NULL").Scan(&floor); err != nil {
			return fmt.Errorf("the lowest pending seq: %w", err)
		}
		floor = max(floor-claimTrickleLag, 1)
		return nil
	}
	// setFloor0 sets the floor at the lowest pending seq: a relay keeping up with a flood
	// sealed it moments ago
	setFloor0 := func(ctx context.Context) error {
		if err := setFloor(ctx); err != nil {
			return err
		}
		floor += claimTrickleLag
		return nil
	}
	floorArg := "$floor"
	scenarios := []claimScenario{
		{"a", "empty table, analyzed", steps(exec("ANALYZE outbox.events")), []claimQuery{ordered(false), unordered}},
		{
			"b", fmt.Sprintf("drained backlog: %d rows inserted, all marked published by one UPDATE, ANALYZE (no VACUUM), then %d pending", n, claimPending),
			steps(fill(n, false), exec("UPDATE outbox.events SET published_at = now(), attempts = attempts + 1 WHERE published_at IS NULL", "ANALYZE outbox.events"),
				fill(claimPending, false), exec("CHECKPOINT")),
			[]claimQuery{ordered(true), unordered},
		},
		{
			"b′", "the same after VACUUM ANALYZE (what autovacuum, off on this server, would do)",
			exec("VACUUM ANALYZE outbox.events", "CHECKPOINT"),
			[]claimQuery{ordered(false), unordered},
		},
		{
			"b″", fmt.Sprintf("a trickle after a drained backlog: %d rows drained as in (b) (ANALYZE, no VACUUM), then %d pending; the relay's default BatchSize 100, MaxPerAggregate 10", n, claimTrickle),
			steps(fill(n, false), exec("UPDATE outbox.events SET published_at = now(), attempts = attempts + 1 WHERE published_at IS NULL", "ANALYZE outbox.events"),
				fill(claimTrickle, false), exec("CHECKPOINT"), setFloor),
			[]claimQuery{
				{"ordered claim, defaults, no floor", "claim_ordered", "0, 0, NULL, 100, 10, NULL, 1000, 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL", false},
				{"unordered claim, defaults, no floor", "claim_unordered", "0, 0, 100", false},
				{"ordered claim, defaults, floor", "claim_ordered", floorArg + ", 0, NULL, 100, 10, NULL, 1000, 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL", true},
				{"unordered claim, defaults, floor", "claim_unordered", floorArg + ", 0, 100", false},
			},
		},
		{
			"c", fmt.Sprintf("%d retained published rows (written published) + %d pending, ANALYZE", n, claimPending),
			steps(fill(n, true), fill(claimPending, false), exec("ANALYZE outbox.events", "CHECKPOINT")),
			[]claimQuery{ordered(false), unordered},
		},
		{
			"e", fmt.Sprintf("under a flood (the isolation part's): %d events of type flood over 1,000 aggregates written pending and marked published, on a fresh schema (no ANALYZE, no VACUUM), then %d of them pending over as many aggregates and %d of type quiet; the relay's default BatchSize 100, MaxPerAggregate 10, reading from the lowest pending row (its floor)", n, claimFlood, claimTrickle),
			steps(exec(
				"INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload) SELECT gen_random_uuid(), 'flood', 'flood-' || (g % 1000), 'flood.changed', '{}' FROM generate_series(1, "+strconv.Itoa(n)+") g",
				"UPDATE outbox.events SET published_at = now(), attempts = attempts + 1 WHERE published_at IS NULL",
				"INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload) SELECT gen_random_uuid(), 'flood', 'flood-' || g, 'flood.changed', '{}' FROM generate_series(1, "+strconv.Itoa(claimFlood)+") g",
				"INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload) SELECT gen_random_uuid(), 'quiet', 'quiet-' || g, 'quiet.changed', '{}' FROM generate_series(1, "+strconv.Itoa(claimTrickle)+") g",
				"CHECKPOINT"), setFloor0),
			[]claimQuery{
				{"ordered claim, defaults, floor", "claim_ordered", floorArg + ", 0, NULL, 100, 10, NULL, 1000, 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL", true},
				{"ordered claim, defaults, floor, 1 of 4 relays", "claim_ordered", floorArg + ", 0, '{0,1,2,3}'::int[], 100, 10, NULL, 1000, 16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL", true},
				{"unordered claim, defaults, floor", "claim_unordered", floorArg + ", 0, 100", false},
			},
		},
		{
			"d", fmt.Sprintf("the drain's backlog: %d pending rows over %d aggregates, VACUUM ANALYZE", b.o.events, b.o.aggregates),
			steps(fill(b.o.events, false), exec("VACUUM ANALYZE outbox.events", "CHECKPOINT")),
			[]claimQuery{ordered(true), orderedQuarter, orderedDelete, unordered, {"unordered claim, delete-on-publish", "claim_unordered_delete", fmt.Sprintf("0, 0, %d", batch), false}},
		},
	}

	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return partReport{}, fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var all []claimMeasure
	var md strings.Builder
	for _, sc := range scenarios {
		fmt.Fprintf(&md, "- (%s) %s\n", sc.key, sc.name)
		fmt.Fprintf(os.Stderr, "claim: %s\n", sc.name)
		if err := sc.prepare(ctx); err != nil {
			return partReport{}, fmt.Errorf("%s: %w", sc.name, err)
		}
		for _, q := range sc.queries {
			q.args = strings.ReplaceAll(q.args, floorArg, strconv.FormatInt(floor, 10))
			ms, err := b.explain(ctx, conn, sc.key, q)
			if err != nil {
				return partReport{}, fmt.Errorf("%s, %s: %w", sc.name, q.label, err)
			}
			all = append(all, ms...)
		}
	}
	return b.claimReport(md.String(), all), nil
}

// explain runs EXPLAIN (ANALYZE, BUFFERS) of q once per claimRuns entry.
func (b *bench) explain(ctx context.Context, conn *pgx.Conn, scenario string, q claimQuery) ([]claimMeasure, error) {
	text, err := readSQL(b.o.sqlDir, q.file)
	if err != nil {
		return nil, fmt.Errorf("read the relay's SQL (run from bench/ or set -sqldir): %w", err)
	}
	args := q.args
	if _, err := conn.Exec(ctx, "PREPARE q AS "+strings.ReplaceAll(text, "{{schema}}", `"outbox"`)); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", q.file, err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE q") }()
	var out []claimMeasure
	for _, run := range claimRuns {
		lines, err := explainOnce(ctx, conn, run.mode, args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", run.name, err)
		}
		out = append(out, claimMeasure{scenario, q.label, run.name, summarizePlan(lines), lines, q.show && run.name != "custom #2"})
	}
	return out, nil
}

// explainOnce explains one execution of the prepared statement q in a transaction it
// rolls back, so nothing stays locked or changed.
func explainOnce(ctx context.Context, conn *pgx.Conn, planMode, args string) ([]string, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+planMode); err != nil {
		return nil, fmt.Errorf("set plan_cache_mode: %w", err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) EXECUTE q("+args+")", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	return lines, nil
}

func (b *bench) claimReport(scenarios string, all []claimMeasure) partReport {
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Claim cost and plan stability\n\n")
	p("`EXPLAIN (ANALYZE, BUFFERS)` of the relay's claim statements as the relay runs them (read from `internal/sqlq/queries`, schema \"outbox\"; BatchSize %d, MaxPerAggregate %d, all partitions unless said), ", b.o.batch, b.o.maxPerAggregate)
	p("prepared and executed in a transaction that is rolled back: twice with a custom plan, then with the generic plan that a prepared statement (pgx caches them) switches to after five executions. ")
	p("Scans lists the distinct scan nodes; removed is \"Rows Removed by Filter\" × loops summed over nodes (rows walked past); JIT is the JIT compilation total (server default jit = on). ")
	p("The claim statements mark the rows they claim as published (or delete them, in delete-on-publish, shown for the drain's backlog (d)); the rolled-back transaction undoes it. Scenarios:\n\n%s\n", scenarios)
	p("| scenario | statement | run | top node | scans | rows | removed | shared hit/read | JIT ms | execution ms |\n|---|---|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, m := range all {
		p("| (%s) | %s | %s | %s | %s | %d | %d | %d/%d | %s | %.1f |\n", m.scenario, m.query, m.run, m.sum.root,
			strings.Join(m.sum.scans, "; "), m.sum.rows, m.sum.removed, m.sum.sharedHit, m.sum.sharedRead, m.sum.jitText(), m.sum.execMS)
	}
	for _, m := range all {
		if !m.show {
			continue
		}
		p("\n<details><summary>Plan: (%s) %s, %s</summary>\n\n```\n%s\n```\n</details>\n", m.scenario, m.query, m.run, strings.Join(m.plan, "\n"))
	}
	var targets []string
	for _, m := range all {
		// A trickle after a drained backlog, once the first claim has met the drained
		// rows' dead index entries (custom #2), and in the generic plan a relay settles on.
		if m.scenario == "b″" && m.run != "custom #1" && strings.HasSuffix(m.query, ", floor") {
			targets = append(targets, fmt.Sprintf("Claim of a trickle after a drained backlog (ANALYZE, no VACUUM), %s, %s, ≤ %.0f ms: %s — %.1f ms.",
				m.query, m.run, targetClaimMS, benchreport.Met(m.sum.execMS <= targetClaimMS), m.sum.execMS))
		}
	}
	return partReport{md: md.String(), targets: targets}
}

// targetClaimMS bounds a claim of a trickle after a drained backlog (scenario b″).
const targetClaimMS = 5.0

// sqlInclude is the relay's include directive (internal/sqlq): {{include name}} stands for
// the text of <name>.sql.
var sqlInclude = regexp.MustCompile(`\{\{include ([a-z_]+)\}\}`)

// claimParams numbers the claims' named parameters (@floor, …: relay/claim.go binds them
// by name) in the order of this part's EXECUTE argument lists.
var claimParams = map[string]int{
	"floor": 1, "replays": 2, "batch_size": 3, // unordered
	"scope": 3, "heads": 4, "max_per_aggregate": 5, "publish_past_dead": 6, "max_events": 7,
	"partitions": 8, "cursor_types": 9, "cursor_ids": 10, "limit_types": 11, "limits": 12,
	"only_types": 13, "skip_types": 14, "cap_types": 15, "caps": 16, // ordered
}

// sqlParam is a named parameter of the relay's SQL.
var sqlParam = regexp.MustCompile(`@([a-z_]+)`)

// readSQL reads the relay's query name from dir, as the relay renders it (includes
// expanded, and theirs, named parameters numbered as claimParams says, schema not yet substituted).
func readSQL(dir, name string) (string, error) {
	fsys := os.DirFS(dir) // reads stay inside dir
	read := func(name string) (string, error) {
		b, err := fs.ReadFile(fsys, name+".sql")
		return string(b), err
	}
	text, err := read(name)
	if err != nil {
		return "", err
	}
	// parts include parts: expand until none is left (a few rounds; a cycle is an error)
	for round := 0; sqlInclude.MatchString(text); round++ {
		if round == 4 {
			return "", fmt.Errorf("%s: includes nested deeper than 4 (a cycle?)", name)
		}
		for _, m := range sqlInclude.FindAllStringSubmatch(text, -1) {
			part, err := read(m[1])
			if err != nil {
				return "", err
			}
			text = strings.ReplaceAll(text, m[0], part)
		}
	}
	var unknown error
	text = sqlParam.ReplaceAllStringFunc(text, func(m string) string {
		n, ok := claimParams[m[1:]]
		if !ok {
			unknown = fmt.Errorf("%s: parameter %s has no place in this part's argument lists", name, m)
			return m
		}
		return "$" + strconv.Itoa(n)
	})
	return text, unknown
}
