package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Commit order differs from seq order. T1 takes a lower seq and commits
// late; T2 commits at once. The relay publishes T2's event, never skips T1's for good,
// and publishes it once T1 commits. When T1 rolls back instead, nothing stalls.
func TestInFlightTransactionIsNotSkipped(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "commits-late", false: "rolls-back"}[commit], func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := context.Background()
			sink := &memsink.Sink{}
			start(t, newRelay(t, pool, sink, fastConfig()))

			t1, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = t1.Rollback(ctx) }()
			ev := func(agg string) outbox.Event {
				return outbox.Event{AggregateType: "order", AggregateID: agg, EventType: "x", AggregateVersion: 1}
			}
			if err := outbox.Enqueue(ctx, outbox.PgxTx(t1), ev("t1")); err != nil {
				t.Fatal(err)
			}
			if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), ev("t2")) }); err != nil {
				t.Fatal(err)
			}
			waitFor(t, sink, 10*time.Second, "T2's event", func(m []outbox.Message) bool { return len(m) == 1 && m[0].AggregateID == "t2" })
			if commit {
				if err := t1.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				waitFor(t, sink, 10*time.Second, "T1's late event", func(m []outbox.Message) bool { return len(m) == 2 && m[1].AggregateID == "t1" })
				return
			}
			if err := t1.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), ev("t3")) }); err != nil {
				t.Fatal(err)
			}
			msgs := waitFor(t, sink, 10*time.Second, "T3's event after the rollback", func(m []outbox.Message) bool { return len(m) == 2 })
			if msgs[1].AggregateID != "t3" {
				t.Fatalf("delivered %s, want t3", msgs[1].AggregateID)
			}
		})
	}
}

// A message the broker refuses as too large is a permanent failure:
// dead at once with its reason, no retry; under the default policy it holds its
// aggregate, and other aggregates flow.
func TestOversizeAtSinkIsDeadWithReason(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	big := outbox.Event{AggregateType: "doc", AggregateID: "big", EventType: "doc.saved", Payload: []byte(`"` + strings.Repeat("x", 800<<10) + `"`)}
	after := outbox.Event{AggregateType: "doc", AggregateID: "big", EventType: "doc.saved", Payload: []byte(`"small"`)}
	other := outbox.Event{AggregateType: "doc", AggregateID: "other", EventType: "doc.saved", Payload: []byte(`"small"`)}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), big, after, other) }); err != nil {
		t.Fatal(err)
	}
	sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		if len(m.Payload) > 512<<10 {
			return outbox.Permanent(errors.New("MESSAGE_TOO_LARGE: 819202 bytes exceeds max.message.bytes 524288"))
		}
		return nil
	}}
	start(t, newRelay(t, pool, sink, fastConfig()))
	waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.dead_letters WHERE aggregate_id = 'big' AND attempts = 1 AND last_error LIKE '%MESSAGE_TOO_LARGE%'`)
	waitFor(t, sink, 10*time.Second, "the other aggregate", func(m []outbox.Message) bool { return len(m) == 1 && m[0].AggregateID == "other" })
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'big' AND published_at IS NULL AND dead_at IS NULL`); n != 1 {
		t.Fatalf("the event after the dead one: %d pending, want 1 (held)", n)
	}
}

// A row written out of band that cannot be decoded (headers that are not
// an object of strings) fails alone, dead with the reason; its data is left as it was;
// rows claimed in the same batch are published.
func TestUndecodableRowFailsAlone(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	enqueue(t, pool, aggregates("ok", 4), 1)
	_, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, headers, payload)
		VALUES (gen_random_uuid(), 'order', 'raw', 'order.raw', '{"retries": 3}', '{"a": 1}')`)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, []string{"raw"}, 2) // claimed in the same batch, behind the bad row
	before := rowText(t, pool, "raw")
	sink := &memsink.Sink{}
	start(t, newRelay(t, pool, sink, fastConfig()))
	waitFor(t, sink, 10*time.Second, "the decodable rows", func(m []outbox.Message) bool { return len(m) == 4 })
	waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.dead_letters WHERE aggregate_id = 'raw' AND last_error LIKE 'undecodable row: headers%'`)
	if after := rowText(t, pool, "raw"); after != before {
		t.Fatalf("the undecodable row's data changed:\n%s\n%s", before, after)
	}
	// The rows after it in its aggregate were claimed with it, not sent, and put back
	// untouched: pending, no attempt counted, held by the dead row.
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'raw' AND dead_at IS NULL
		AND published_at IS NULL AND attempts = 0`); n != 2 {
		t.Fatalf("%d of the 2 rows behind the undecodable one are pending and untouched", n)
	}
	for _, m := range sink.Messages() {
		if m.AggregateID == "raw" {
			t.Fatalf("%s published past its aggregate's dead event", m.ID)
		}
	}
}

func rowText(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, agg string,
) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(), `SELECT concat_ws('|', id, aggregate_type, aggregate_id, event_type, headers, payload, payload_bytes, created_at)
		FROM outbox.events WHERE aggregate_id = $1 ORDER BY seq LIMIT 1`, agg).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An application retry enqueuing the same event id keeps one event, and a
// replay keeps the original id.
func TestDuplicateIDFromApplicationRetryAndReplayKeepsID(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	e := outbox.Event{ID: outbox.NewID(), AggregateType: "order", AggregateID: "1", EventType: "order.paid"}
	for range 2 {
		err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), e) })
		if err != nil && !errors.Is(err, outbox.ErrDuplicateID) {
			t.Fatal(err)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events`); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	var fail atomicBool
	fail.set(true)
	sink := &memsink.Sink{FailFunc: func(outbox.Message) error {
		if fail.get() {
			return outbox.Permanent(errors.New("schema rejected"))
		}
		return nil
	}}
	start(t, newRelay(t, pool, sink, fastConfig()))
	waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.dead_letters`)
	fail.set(false)
	if _, err := relay.Replay(ctx, pool, relay.Action{IDs: []uuidT{e.ID}, Actor: "ops", Reason: "schema fixed"}); err != nil {
		t.Fatal(err)
	}
	msgs := waitFor(t, sink, 10*time.Second, "the replayed event", func(m []outbox.Message) bool { return len(m) == 1 })
	if msgs[0].ID != e.ID {
		t.Fatalf("replayed with id %s, want the original %s", msgs[0].ID, e.ID)
	}
}

// An event scheduled in the future is never published early; one
// scheduled in the past is published at once.
func TestDelayedEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	sink := &memsink.Sink{}
	start(t, newRelay(t, pool, sink, fastConfig()))
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	future := outbox.Event{AggregateType: "t", AggregateID: "future", EventType: "x", AvailableAt: dbNow.Add(1500 * time.Millisecond)}
	past := outbox.Event{AggregateType: "t", AggregateID: "past", EventType: "x", AvailableAt: dbNow.Add(-24 * time.Hour)}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), future, past) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, sink, 5*time.Second, "the past event", func(m []outbox.Message) bool { return len(m) >= 1 && m[0].AggregateID == "past" })
	waitFor(t, sink, 10*time.Second, "the future event", func(m []outbox.Message) bool { return len(m) == 2 })
	waitSQL(t, pool, 10*time.Second, 2, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
	var early bool
	if err := pool.QueryRow(ctx, `SELECT published_at < available_at FROM outbox.events WHERE aggregate_id = 'future'`).Scan(&early); err != nil {
		t.Fatal(err)
	}
	if early {
		t.Fatal("the future event was published before its available_at")
	}
}

// A scheduled event is published when it comes due, not at the relay's next poll: with
// polls an hour apart, an event due in 600 ms is published within a second of its
// available_at — written alone (the claim after the wake-up finds nothing), and beside
// an event due now (the claim takes that one and is not full) — in both modes.
func TestScheduledEventPublishedWhenDue(t *testing.T) {
	for _, beside := range []bool{false, true} {
		t.Run(fmt.Sprintf("beside-a-due-event=%t", beside), func(t *testing.T) {
			t.Parallel()
			inBothModes(t, func(t *testing.T, mode relay.Mode) {
				pool := pgtest.Pool(t)
				ctx := context.Background()
				sink := &memsink.Sink{}
				cfg := fastConfig()
				cfg.Mode, cfg.PollInterval, cfg.FallbackPollInterval = mode, time.Hour, time.Hour
				r := newRelay(t, pool, sink, cfg)
				start(t, r)
				waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.relay_members`)
				time.Sleep(100 * time.Millisecond) //nolint:forbidigo // the relay's first claims have run: it is idle
				var dbNow time.Time
				if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
					t.Fatal(err)
				}
				events := []outbox.Event{{AggregateType: "t", AggregateID: "later", EventType: "x", AvailableAt: dbNow.Add(600 * time.Millisecond)}}
				if beside {
					events = append(events, outbox.Event{AggregateType: "t", AggregateID: "now", EventType: "x"})
				}
				if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
					t.Fatal(err)
				}
				r.Wake()
				waitSQL(t, pool, 10*time.Second, len(events), `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
				var late time.Duration
				if err := pool.QueryRow(ctx, `SELECT published_at - available_at FROM outbox.events WHERE aggregate_id = 'later'`).Scan(&late); err != nil {
					t.Fatal(err)
				}
				t.Logf("published %s after its available_at", late)
				if late < 0 || late > time.Second {
					t.Fatalf("published %s after its available_at, want within [0, 1s]", late)
				}
			})
		})
	}
}

// The mark and the put-back hit a serialization failure (40001), then a
// deadlock (40P01), raised once each by a trigger. The mark is made by the claim
// statement, before the sink has anything: a failing claim rolls back and is claimed
// again, nothing published twice. The put-back of unpublished rows comes after the sink
// published the rest of the batch: it is retried behind a savepoint, keeping the claim,
// so the published messages are not published again. In both relay modes and both kinds
// of retention (a put-back is an UPDATE, or in delete-on-publish an INSERT).
func TestSerializationFailureRetried(t *testing.T) {
	t.Parallel()
	const raiseOnce = `
		-- nextval is not rolled back with the failed statement: each fault fires once.
		CREATE SEQUENCE fault_once;
		CREATE FUNCTION raise_once() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE n bigint := nextval('fault_once');
		BEGIN
			IF n = 1 THEN RAISE EXCEPTION 'injected serialization failure' USING ERRCODE = '40001'; END IF;
			IF n = 2 THEN RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01'; END IF;
			RETURN NULL;
		END $$;`
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode)+"/mark", func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			_, err := pool.Exec(context.Background(), raiseOnce+`
				CREATE TRIGGER raise_once AFTER UPDATE OF published_at ON outbox.events
					FOR EACH STATEMENT EXECUTE FUNCTION raise_once();`)
			if err != nil {
				t.Fatal(err)
			}
			enqueue(t, pool, aggregates("s", 5), 2)
			sink := &memsink.Sink{}
			cfg := fastConfig()
			cfg.Mode = mode
			r := newRelay(t, pool, sink, cfg)
			start(t, r)
			waitSQL(t, pool, 10*time.Second, 10, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
			if n := queryInt(t, pool, `SELECT last_value FROM fault_once`); n < 3 {
				t.Fatalf("the trigger ran %d times, want the two faults and a success", n)
			}
			if msgs := sink.Messages(); len(msgs) != 10 {
				t.Fatalf("%d deliveries of 10 events: a failed mark published", len(msgs))
			}
			if st := r.Stats(); st.Errors != 2 {
				t.Fatalf("Errors = %d, want the 2 failed claims", st.Errors)
			}
		})
		for _, retention := range []relay.RetentionMode{relay.KeepThenDelete, relay.DeleteOnPublish} {
			t.Run(string(mode)+"/put-back/"+string(retention), func(t *testing.T) {
				t.Parallel()
				pool := pgtest.Pool(t)
				// A row put back after a failed attempt: the claim's mark undone, or the
				// deleted row inserted again with its attempt and error.
				trigger := `CREATE TRIGGER raise_once AFTER UPDATE ON outbox.events FOR EACH ROW
					WHEN (OLD.published_at IS NOT NULL AND NEW.published_at IS NULL) EXECUTE FUNCTION raise_once();`
				if retention == relay.DeleteOnPublish {
					trigger = `CREATE TRIGGER raise_once AFTER INSERT ON outbox.events FOR EACH ROW
						WHEN (NEW.attempts > 0) EXECUTE FUNCTION raise_once();`
				}
				if _, err := pool.Exec(context.Background(), raiseOnce+trigger); err != nil {
					t.Fatal(err)
				}
				enqueue(t, pool, aggregates("s", 5), 2)
				sink := &memsink.Sink{}
				var failed sync.Map
				sink.FailFunc = func(m outbox.Message) error {
					if _, again := failed.LoadOrStore(m.ID, true); !again && m.AggregateID == "s0" {
						return errors.New("transient failure")
					}
					return nil
				}
				cfg := fastConfig()
				cfg.Mode, cfg.Retention.Mode = mode, retention
				cfg.BreakerMinAggregates = 100 // one aggregate failing is not an outage
				r := newRelay(t, pool, sink, cfg)
				start(t, r)
				waitFor(t, sink, 10*time.Second, "every event", distinct(10))
				waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL`)
				if n := queryInt(t, pool, `SELECT last_value FROM fault_once`); n < 3 {
					t.Fatalf("the trigger ran %d times, want the two faults and a success", n)
				}
				// s0's first event failed once; in ordered mode its second was not sent then.
				perID := map[string]int{}
				for _, m := range sink.Messages() {
					perID[m.ID.String()]++
				}
				for _, m := range sink.Messages() {
					if m.AggregateID != "s0" && perID[m.ID.String()] != 1 {
						t.Fatalf("event %s of %s delivered %d times: the retried put-back published its batch again", m.ID, m.AggregateID, perID[m.ID.String()])
					}
				}
				if st := r.Stats(); st.SettleRetries != 2 {
					t.Fatalf("SettleRetries = %d, want 2", st.SettleRetries)
				}
			})
		}
	}
}

// Isolation levels: relays whose transactions run at REPEATABLE READ or
// SERIALIZABLE (default_transaction_isolation on their pool), two at once, while events
// are written and the sink fails a tenth of first attempts (so rows are put back). A
// claim that meets a row changed since its snapshot fails with a serialization error and
// is claimed again: every event is published, first deliveries in order in ordered mode.
func TestRelaysUnderStricterIsolation(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"repeatable read", "serializable"} {
		for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
			t.Run(strings.ReplaceAll(level, " ", "-")+"/"+string(mode), func(t *testing.T) {
				t.Parallel()
				connString := pgtest.ConnString(t, nil)
				pool := pgtest.PoolFor(t, connString)
				sink := &memsink.Sink{}
				var tried sync.Map
				sink.FailFunc = func(m outbox.Message) error {
					if _, again := tried.LoadOrStore(m.ID, true); !again && m.ID[15]%10 == 0 {
						return errors.New("transient failure")
					}
					return nil
				}
				for range 2 {
					cfg, err := pgxpool.ParseConfig(connString)
					if err != nil {
						t.Fatal(err)
					}
					cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
					relayPool, err := pgxpool.NewWithConfig(context.Background(), cfg)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(relayPool.Close)
					var got string
					if err := relayPool.QueryRow(context.Background(), `SHOW transaction_isolation`).Scan(&got); err != nil {
						t.Fatal(err)
					}
					if got != level {
						t.Fatalf("the relay pool runs at %s, want %s", got, level)
					}
					rc := fastConfig()
					rc.Mode, rc.BatchSize = mode, 7
					rc.BreakerMinAggregates = 1000 // per-message failures, not an outage
					start(t, newRelay(t, relayPool, sink, rc))
				}
				const aggs, perAgg = 10, 30
				produce(context.Background(), t, pool, aggregates("i", aggs), perAgg, time.Second)
				waitSQL(t, pool, time.Minute, aggs*perAgg, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
				msgs := sink.Messages()
				if distinctIDs(msgs) != aggs*perAgg {
					t.Fatalf("%d distinct events delivered, want %d", distinctIDs(msgs), aggs*perAgg)
				}
				if mode == relay.Ordered {
					checkOrder(t, msgs)
				}
				if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE attempts > 1`); n == 0 {
					t.Fatal("no event was retried: the failure injection did not work")
				}
			})
		}
	}
}
