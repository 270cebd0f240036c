package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
)

// The ordered claim discovers its heads by a loose index scan, sharing the heads fairly:
// each aggregate type gets an equal share, and within a type the aggregates are taken in
// key order from the type's cursor, round the end. Whatever the table holds — held
// aggregates, heads and followers in backoff, rows locked by another claim, aggregates
// out of scope, an aggregate type that publishes past its dead events — it claims, per
// type, exactly its share of the claimable aggregates, the right rows of each.
func TestOrderedClaimSharesHeadsFairly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	// 40 aggregates of two types, 6 events each, interleaved.
	for v := 1; v <= 6; v++ {
		for a := range 40 {
			typ := "order"
			if a%5 == 0 {
				typ = "ledger"
			}
			if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
				VALUES (gen_random_uuid(), $1, $2, 'changed', '{}')`, typ, fmt.Sprint(a)); err != nil {
				t.Fatal(err)
			}
		}
	}
	nth := func(agg, n int) string { // the seq of aggregate agg's n-th event (1-based)
		return fmt.Sprintf(`(SELECT seq FROM outbox.events WHERE aggregate_id = '%d' ORDER BY seq OFFSET %d LIMIT 1)`, agg, n-1)
	}
	for _, q := range []string{
		// held: a dead head (order), and a dead head of a type that publishes past it (ledger)
		`UPDATE outbox.events SET dead_at = now(), last_error = 'x' WHERE seq = ` + nth(1, 1),
		`UPDATE outbox.events SET dead_at = now(), last_error = 'x' WHERE seq = ` + nth(10, 1),
		// a dead event in the middle: its followers are held
		`UPDATE outbox.events SET dead_at = now(), last_error = 'x' WHERE seq = ` + nth(2, 3),
		// a discarded dead head holds nothing
		`UPDATE outbox.events SET dead_at = now(), discarded_at = now(), last_error = 'x' WHERE seq = ` + nth(3, 1),
		// a head in backoff, and a follower in backoff
		`UPDATE outbox.events SET available_at = now() + interval '1 hour' WHERE seq = ` + nth(4, 1),
		`UPDATE outbox.events SET available_at = now() + interval '1 hour' WHERE seq = ` + nth(6, 3),
		// published heads: the next row is the head
		`UPDATE outbox.events SET published_at = now() WHERE seq IN (` + nth(7, 1) + `, ` + nth(7, 2) + `)`,
		// an aggregate with nothing pending
		`UPDATE outbox.events SET published_at = now() WHERE aggregate_id = '8'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Another claim holds aggregate 9's head and aggregate 11's third event.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM outbox.events WHERE seq IN (`+nth(9, 1)+`, `+nth(11, 3)+`) FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	errRollback := errors.New("rolled back")
	claim := "claim_ordered"
	type cursor struct{ types, ids []string }
	run := func(t *testing.T, scope []int, heads int, pastDead []string, c cursor) []int64 {
		t.Helper()
		var seqs []int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			sql, args := relay.OrderedClaimSQL(claim, relay.OrderedClaimArgs{
				Scope: scope, Heads: heads, MaxPerAggregate: 4, PublishPastDead: pastDead, MaxEvents: 1000, Partitions: 16,
				CursorTypes: c.types, CursorIDs: c.ids,
			})
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				values, err := rows.Values() // the seq first: the other columns are the relay's
				if err != nil {
					return err
				}
				seqs = append(seqs, values[0].(int64))
			}
			if err := rows.Err(); err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		slices.Sort(seqs)
		return seqs
	}
	// The rows each aggregate has claimable, with MaxPerAggregate 4 and no limits
	// reached: what the cut must leave of each.
	aggregateOf := map[int64]string{}
	rows, err := pool.Query(ctx, `SELECT seq, aggregate_id FROM outbox.events`)
	if err != nil {
		t.Fatal(err)
	}
	var (
		seq int64
		id  string
	)
	if _, err := pgx.ForEachRow(rows, []any{&seq, &id}, func() error { aggregateOf[seq] = id; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"1": 0, "4": 0, "8": 0, "9": 0, "10": 0, // held, head in backoff, none pending, head locked, held
		"2": 2, "6": 2, "11": 2, // before a dead event, a follower in backoff, a locked follower
	}
	typeOf := func(agg string) string {
		if n, _ := strconv.Atoi(agg); n%5 == 0 {
			return "ledger"
		}
		return "order"
	}
	// claimable lists, per type in key order, the aggregates a claim may take (in scope).
	claimable := func(t *testing.T, scope []int, pastDead []string) map[string][]string {
		out := map[string][]string{}
		for a := range 40 {
			agg := fmt.Sprint(a)
			if w, ok := want[agg]; ok && w == 0 && (agg != "10" || !slices.Contains(pastDead, "ledger")) {
				continue
			}
			if scope != nil && !slices.Contains(scope, partitionOf(t, pool, typeOf(agg), agg)*16/4096) {
				continue
			}
			out[typeOf(agg)] = append(out[typeOf(agg)], agg)
		}
		for _, aggs := range out {
			slices.Sort(aggs)
		}
		return out
	}
	claimedAggregates := func(seqs []int64) map[string][]string {
		seen := map[string]bool{}
		out := map[string][]string{}
		for _, s := range seqs {
			if a := aggregateOf[s]; !seen[a] {
				seen[a] = true
				out[typeOf(a)] = append(out[typeOf(a)], a)
			}
		}
		for _, aggs := range out {
			slices.Sort(aggs)
		}
		return out
	}
	checkCut := func(t *testing.T) {
		claimedPer := map[string]int{}
		for _, seq := range run(t, nil, 100, nil, cursor{}) {
			claimedPer[aggregateOf[seq]]++
		}
		for a := range 40 {
			agg := fmt.Sprint(a)
			w, ok := want[agg]
			if !ok {
				w = 4
			}
			if claimedPer[agg] != w {
				t.Errorf("aggregate %s: claimed %d rows, want %d", agg, claimedPer[agg], w)
			}
		}
	}
	checkShares := func(t *testing.T) {
		for _, c := range []struct {
			name     string
			scope    []int
			heads    int
			pastDead []string
		}{
			{"all", nil, 100, nil},
			{"all, publish past dead ledgers", nil, 100, []string{"ledger"}},
			{"fewer heads than there are", nil, 7, nil},
			{"a quarter of the partitions", []int{0, 1, 2, 3}, 100, nil},
			{"another quarter, few heads", []int{8, 9, 10, 11}, 3, []string{"ledger"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				all := claimable(t, c.scope, c.pastDead)
				share := max(1, c.heads/len(all))
				got := claimedAggregates(run(t, c.scope, c.heads, c.pastDead, cursor{}))
				for typ, aggs := range all {
					// each type's share of the heads: its first claimable aggregates in key order
					if w := aggs[:min(share, len(aggs))]; !slices.Equal(got[typ], w) {
						t.Errorf("type %s: claimed aggregates %v, want %v (the first %d claimable in key order)", typ, got[typ], w, share)
					}
				}
				if len(got) == 0 {
					t.Fatal("nothing claimed")
				}
			})
		}
	}
	// The rotation: from a type's cursor onwards, round the end, up to the cursor.
	checkRotation := func(t *testing.T) {
		// Aggregate 9's head is locked by the other claim: the rotation counts it (it
		// cannot know), and the lock step drops it.
		orders := append(claimable(t, nil, nil)["order"], "9")
		slices.Sort(orders)
		for _, start := range []int{0, 5, len(orders) - 2, len(orders) - 1} {
			cur := cursor{types: []string{"order"}, ids: []string{orders[start]}}
			got := claimedAggregates(run(t, nil, 6, nil, cur))["order"]
			var w []string
			for k := 1; k <= 3; k++ {
				if a := orders[(start+k)%len(orders)]; a != "9" {
					w = append(w, a)
				}
			}
			slices.Sort(w)
			if !slices.Equal(got, w) {
				t.Errorf("cursor %s: claimed %v, want %v (the next 3 after it, round the end)", orders[start], got, w)
			}
		}
	}

	for _, variant := range []string{"claim_ordered", "claim_ordered_delete"} {
		claim = variant
		t.Run(variant, func(t *testing.T) {
			checkCut(t)
			checkShares(t)
			checkRotation(t)
		})
	}
}

// When the types' limits add up to more than the claim's heads, the claim cuts turn by
// turn — each type's oldest candidate, then each one's second — not oldest first: a type
// whose one head is newer than all of a backlog's still gets its turn. (Cut oldest first,
// a trickle beside a flood whose limit was the whole claim was left out of every claim,
// and so never given a limit of its own: starved until the flood was drained.)
func TestOrderedClaimCutsTurnByTurn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	execSQL(t, pool, floodAndQuiet(100)...)
	types := map[string]int{}
	for _, row := range claimByHand(t, pool, relay.OrderedClaimArgs{
		Heads: 10, MaxPerAggregate: 1, MaxEvents: 10, Partitions: 16,
		LimitTypes: []string{"flood"}, Limits: []int{10}, // quiet: the equal share, 5
	}) {
		types[row[2].(string)]++ // aggregate_type
	}
	if types["quiet"] != 1 || types["flood"] != 9 {
		t.Fatalf("claimed %v, want flood 9 and quiet 1", types)
	}
}

// A claim names a type full (shares_full, its last column) only when the type had more
// claimable heads than its share, not as many: with more types than half the heads the
// equal share is one head, and a type with its one head is not a backlog.
func TestSharesFullOnlyWhenATypeHadMore(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	execSQL(t, pool,
		`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type) SELECT gen_random_uuid(), 't' || g, 'a', 'x' FROM generate_series(1, 60) g`,
		`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type) SELECT gen_random_uuid(), 'deep', 'd' || g, 'x' FROM generate_series(1, 3) g`)
	rows := claimByHand(t, pool, relay.OrderedClaimArgs{Heads: 100, MaxPerAggregate: 1, MaxEvents: 100, Partitions: 16})
	if len(rows) == 0 {
		t.Fatal("the claim took nothing")
	}
	var full []string
	for _, v := range rows[0][len(rows[0])-1].([]any) { // the same on every row
		full = append(full, v.(string))
	}
	if !slices.Equal(full, []string{"deep"}) {
		t.Fatalf("shares_full %v, want [deep] (61 types, a share of one head each; only deep had more)", full)
	}
}

// claimByHand runs one ordered claim (claim_ordered.sql) with a, commits it, and returns
// its rows' values.
func claimByHand(t *testing.T, pool *pgxpool.Pool, a relay.OrderedClaimArgs) [][]any {
	t.Helper()
	ctx := context.Background()
	var out [][]any
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sql, args := relay.OrderedClaimSQL("claim_ordered", a)
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			values, err := rows.Values()
			if err != nil {
				return err
			}
			out = append(out, values)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
