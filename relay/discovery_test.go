package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// The ordered claim finds its heads either by walking the backlog in seq order or by
// discovering them with a loose index scan (relay/heads.go chooses). Both must claim the
// same rows whatever the table holds: held aggregates, heads and followers in backoff,
// rows locked by another claim, aggregates out of scope, a head limit below the number
// of heads, an aggregate type that publishes past its dead events.
func TestDiscoveryClaimsWhatTheWalkClaims(t *testing.T) {
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
	claim := sqlq.Query("claim_ordered", `"outbox"`)
	run := func(t *testing.T, scope []int, heads, discover int, pastDead []string) []int64 {
		t.Helper()
		var seqs []int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, claim, scope, heads, 4, pastDead, 1000, 16, discover)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var seq int64
				if err := rows.Scan(&seq, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil); err != nil {
					return err
				}
				seqs = append(seqs, seq)
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
	checkCut := func(t *testing.T) {
		claimedPer := map[string]int{}
		for _, seq := range run(t, nil, 100, 0, nil) {
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

	for _, variant := range []string{"claim_ordered", "claim_ordered_delete"} {
		claim = sqlq.Query(variant, `"outbox"`)
		t.Run(variant, func(t *testing.T) {
			checkCut(t)
			checkDiscovery(t, run, aggregateOf)
		})
	}
}

// checkDiscovery compares, with run, the walk's claims and discovery's in several
// scopes and limits.
func checkDiscovery(t *testing.T, run func(t *testing.T, scope []int, heads, discover int, pastDead []string) []int64, aggregateOf map[int64]string) {
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
			walk := run(t, c.scope, c.heads, 0, c.pastDead)
			if len(walk) == 0 {
				t.Fatal("the walk claimed nothing")
			}
			if found := run(t, c.scope, c.heads, 1000, c.pastDead); !slices.Equal(found, walk) {
				t.Fatalf("discovery claimed %v\nthe walk claimed %v", found, walk)
			}
			// Discovery capped at 5 aggregates claims a subset of what a walk claims, from
			// exactly min(5, heads, claimable aggregates) aggregates: the cap counts
			// claimable aggregates only, so the held, backing-off and locked ones that sort
			// first do not use it up.
			capped := run(t, c.scope, c.heads, 5, c.pastDead)
			all := run(t, c.scope, 100, 0, c.pastDead)
			for _, s := range capped {
				if _, ok := slices.BinarySearch(all, s); !ok {
					t.Fatalf("capped discovery claimed seq %d, which no walk claims (%v)", s, all)
				}
			}
			aggs := func(seqs []int64) int {
				seen := map[string]bool{}
				for _, s := range seqs {
					seen[aggregateOf[s]] = true
				}
				return len(seen)
			}
			if got, want := aggs(capped), min(5, c.heads, aggs(all)); got != want || want == 0 {
				t.Fatalf("capped discovery claimed rows of %d aggregates, want %d (min of 5, the head limit %d and %d claimable)", got, want, c.heads, aggs(all))
			}
		})
	}
}
