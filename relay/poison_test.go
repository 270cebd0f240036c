package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// poisonRows are rows written out of band that make every claim including them fail.
var poisonRows = []struct {
	name  string
	setup []string // SQL run before the poison row is inserted
	row   string   // inserts the poison row (aggregate 'poison')
	why   string   // in last_error
	// within: the other events are delivered this soon
	within time.Duration
}{
	{
		// A trigger someone added raises for one row on the claim's mark (or delete).
		name: "trigger-raises",
		setup: []string{
			`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				-- it refuses to let the row be published (marked, or deleted), nothing else
				IF OLD.event_type = 'poison' AND (TG_OP = 'DELETE' OR NEW.published_at IS NOT NULL) THEN
					RAISE EXCEPTION 'audit trigger: refusing event %', OLD.seq USING ERRCODE = '22023';
				END IF;
				RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
			END $$`,
			`CREATE TRIGGER refuse_poison BEFORE UPDATE OR DELETE ON outbox.events FOR EACH ROW EXECUTE FUNCTION refuse_poison()`,
		},
		row: `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type) VALUES (gen_random_uuid(), 'order', 'poison', 'poison')`,
		why: "audit trigger", within: 5 * time.Second,
	},
	{
		// A time Go cannot hold: the relay cannot read the row.
		name: "unreadable-time",
		row:  `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, created_at) VALUES (gen_random_uuid(), 'order', 'poison', 'x', 'infinity')`,
		why:  "read row", within: 5 * time.Second,
	},
	{
		// A deployment that altered the payload column back to jsonb, and 10,800 numbers
		// of 1e100000 (97 KB as written): rendered at 100,001 digits each, the row
		// overruns the server's 1 GB limit on every claim.
		name:  "jsonb-payload-too-large-to-render",
		setup: []string{`ALTER TABLE outbox.events ALTER COLUMN payload TYPE jsonb USING payload::jsonb`},
		row: `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES (gen_random_uuid(), 'order', 'poison', 'x', ('[' || repeat('1e100000,', 10799) || '1e100000]')::jsonb)`,
		why: "string buffer",
		// Rendering the row until the server refuses costs 2.3 s on this machine: the
		// failed claim and the one try that finds the row take two of those (4–5 s with
		// the other tests running beside it; up to 8 s on a loaded machine).
		within: 15 * time.Second,
	},
}

// A row that makes every claim including it fail, however it got there, cannot stop the
// relay: the relay finds it, parks it dead with the error, and the other aggregates are
// delivered within seconds — in both modes and both kinds of claim (mark, delete).
func TestPoisonRowCannotStopTheRelay(t *testing.T) {
	// Not parallel: the render that fails builds a 1 GB string in the server for seconds;
	// beside the parallel tests (and -race) it took over 10 s.
	for _, p := range poisonRows {
		shapes := []struct {
			mode      relay.Mode
			retention relay.RetentionMode
		}{{relay.Ordered, relay.KeepThenDelete}, {relay.Unordered, relay.KeepThenDelete}, {relay.Ordered, relay.DeleteOnPublish}}
		if p.within > 5*time.Second {
			shapes = shapes[:1] // each try builds a 1 GB string in the server: one shape is proof enough
		}
		for _, shape := range shapes {
			t.Run(fmt.Sprintf("%s/%s/%s", p.name, shape.mode, shape.retention), func(t *testing.T) {
				pool := pgtest.Pool(t)
				ctx := context.Background()
				for _, stmt := range p.setup {
					if _, err := pool.Exec(ctx, stmt); err != nil {
						t.Fatal(err)
					}
				}
				enqueue(t, pool, aggregates("before", 10), 1)
				if _, err := pool.Exec(ctx, p.row); err != nil {
					t.Fatal(err)
				}
				enqueue(t, pool, aggregates("after", 15), 1)
				sink := &memsink.Sink{}
				cfg := fastConfig()
				cfg.Mode, cfg.Retention.Mode = shape.mode, shape.retention
				r := newRelay(t, pool, sink, cfg)
				started := time.Now()
				start(t, r)
				waitFor(t, sink, p.within, "the 25 other events", distinct(25))
				t.Logf("the 25 other events delivered %s after the relay started", time.Since(started).Round(time.Millisecond))
				waitSQL(t, pool, p.within, 1, `SELECT count(*) FROM outbox.dead_letters WHERE aggregate_id = 'poison' AND last_error LIKE '%`+p.why+`%'`)
				if st := r.Stats(); st.PoisonRows != 1 {
					t.Fatalf("stats %+v: want one poison row", st)
				}
				for _, m := range sink.Messages() {
					if m.AggregateID == "poison" {
						t.Fatal("the poison row was published")
					}
				}
			})
		}
	}
}

// Written as it was, the same payload is no poison with the json column (the default):
// the relay never renders it and the sink gets the producer's 97 KB.
func TestHugeExponentsAreDeliveredAsWritten(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	payload := "[" + strings.Repeat("1e100000,", 10799) + "1e100000]"
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES (gen_random_uuid(), 'order', 'big', 'x', $1::json)`, payload); err != nil {
		t.Fatal(err)
	}
	sink := &memsink.Sink{}
	start(t, newRelay(t, pool, sink, fastConfig()))
	msgs := waitFor(t, sink, 5*time.Second, "the event", func(m []outbox.Message) bool { return len(m) == 1 })
	if string(msgs[0].Payload) != payload {
		t.Fatalf("payload delivered as %d bytes, written %d", len(msgs[0].Payload), len(payload))
	}
}

// A statement_timeout the DBA set, shorter than a full claim takes (here a
// trigger costs each claimed row 1 ms; claims time out past ~250 rows): the relay halves
// its claims until they fit, instead of retrying one statement that always times out,
// and drains everything; nothing goes dead.
func TestClaimsNarrowUnderAStatementTimeout(t *testing.T) {
	t.Parallel()
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	ctx := context.Background()
	for _, stmt := range []string{
		`CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.001); RETURN NEW; END $$`,
		`CREATE TRIGGER slow_row BEFORE UPDATE ON outbox.events FOR EACH ROW EXECUTE FUNCTION slow_row()`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(t, pool, aggregates("n", 1000), 1)
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "250"
	relayPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relayPool.Close)
	sink := &memsink.Sink{}
	rc := fastConfig()
	rc.Mode, rc.BatchSize = relay.Unordered, 1000
	r := newRelay(t, relayPool, sink, rc)
	start(t, r)
	waitSQL(t, pool, 60*time.Second, 1000, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE dead_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d events went dead under a statement timeout", n)
	}
	if st := r.Stats(); st.Errors == 0 {
		t.Fatalf("no claim timed out (stats %+v): the test did not test the timeout", st)
	}
}
