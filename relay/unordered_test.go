package relay_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Unordered mode marks (or deletes) a batch as published in its claim statement and puts
// back what the sink did not take (ADR 0004). For each retention mode: a sink outage (the
// whole batch rolled back), per-message transient failures (retried, attempt counted),
// per-message "not the message's fault" failures (back to pending, attempt not counted),
// permanent failures and an undecodable row (dead, with the reason). Every event arrives;
// a message delivered again is identical to its first delivery, so a row put back (in
// delete-on-publish: deleted, then inserted again) lost nothing; dead rows keep their data.
func TestUnorderedClaimPutsBackWhatWasNotPublished(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.RetentionMode{relay.KeepThenDelete, relay.DeleteOnPublish, relay.KeepThenArchive} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := context.Background()
			at := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
			var events []outbox.Event
			for i := range 120 {
				e := outbox.Event{
					AggregateType: "order", AggregateID: fmt.Sprintf("u%d", i%30), EventType: "order.changed",
					Payload: []byte(fmt.Sprintf(`{"i": %d, "s": "é\"x"}`, i)),
				}
				switch i % 6 {
				case 1:
					e.ContentType, e.Payload = "application/octet-stream", []byte{0, byte(i), 0xff}
				case 2:
					e.Headers, e.Topic, e.TraceParent = map[string]string{"tenant": "acme", "n": fmt.Sprint(i)}, "orders.v2", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
				case 3:
					e.Payload, e.AggregateType, e.AggregateVersion = nil, "cart", int64(i)
				case 4:
					e.SchemaVersion, e.AvailableAt = 3, at
				}
				if i%40 == 7 {
					e.EventType = "poison"
				}
				events = append(events, e)
			}
			if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, headers, payload)
				VALUES (gen_random_uuid(), 'order', 'raw', 'order.raw', '{"retries": 3}', '{"a": 1}')`); err != nil {
				t.Fatal(err)
			}
			const deadRows = `SELECT string_agg(concat_ws('|', seq, id, aggregate_type, aggregate_id, aggregate_version, event_type,
				schema_version, topic, headers, content_type, payload, payload_bytes, trace_parent, created_at), E'\n' ORDER BY seq)
				FROM outbox.events WHERE event_type IN ('poison', 'order.raw')`
			var deadBefore string
			if err := pool.QueryRow(ctx, deadRows).Scan(&deadBefore); err != nil {
				t.Fatal(err)
			}

			var (
				mu    sync.Mutex
				calls int
				seen  = map[string]int{}              // deliveries attempted per event id, after the outage
				tries = map[string][]outbox.Message{} // every message the sink was handed, by event id
			)
			sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
				mu.Lock()
				defer mu.Unlock()
				tries[m.ID.String()] = append(tries[m.ID.String()], m)
				if calls < 2 {
					return outbox.Unavailable(errors.New("broker down")) // the first batches: an outage
				}
				seen[m.ID.String()]++
				first := seen[m.ID.String()] == 1
				switch {
				case m.EventType == "poison":
					return outbox.Permanent(errors.New("rejected by the broker"))
				case m.Attempt == 1 && m.Seq%5 == 0: // until an attempt is counted (a batch in which
					// nothing succeeded and a message is Unavailable is an outage: nothing counted)
					return errors.New("transient failure")
				case first && m.Seq%7 == 0:
					return outbox.Unavailable(errors.New("partition leader moved")) // not the message's fault
				}
				return nil
			}}
			sink.OnPublish = func([]outbox.Message, []error) { mu.Lock(); calls++; mu.Unlock() }
			cfg := fastConfig()
			cfg.Mode = relay.Unordered
			cfg.Retention.Mode = mode
			cfg.BatchSize = 25
			cfg.PublishCalls = 1            // a sink call is a batch: the first two are an outage
			cfg.BreakerMinAggregates = 1000 // per-message failures are not an outage
			cfg.BreakerInitialDelay, cfg.BreakerMaxDelay = 20*time.Millisecond, 40*time.Millisecond
			r := newRelay(t, pool, sink, cfg)
			start(t, r)

			wantPublished := 0
			for _, e := range events {
				if e.EventType != "poison" {
					wantPublished++
				}
			}
			msgs := waitFor(t, sink, time.Minute, "every publishable event", distinct(wantPublished))
			waitSQL(t, pool, 30*time.Second, 4, `SELECT count(*) FROM outbox.dead_letters WHERE last_error = 'deliver event ' || id || ': permanent: rejected by the broker'
				OR last_error LIKE 'undecodable row: headers%'`)
			// The last batches commit after their messages reached the sink.
			waitSQL(t, pool, 30*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL`)
			waitUntil(t, 10*time.Second, "Stats().Published to count every publishable event", func() bool { return r.Stats().Published >= int64(wantPublished) })

			// Every time the sink was handed an event, it was the same message apart from
			// its attempt: a row put back lost nothing. Rows of every shape came back.
			mu.Lock()
			retried, untouched := 0, 0
			shapes := map[string]bool{}
			for id, ms := range tries {
				for _, m := range ms[1:] {
					a, b := ms[0], m
					a.Attempt, b.Attempt = 0, 0
					if !reflect.DeepEqual(a, b) {
						t.Fatalf("event %s came back changed:\nfirst %+v\nagain %+v", id, a, b)
					}
				}
				if m := ms[0]; seen[id] > 1 {
					switch {
					case m.Seq%5 == 0:
						retried++
					case m.Seq%7 == 0:
						untouched++
					}
					shapes["topic"] = shapes["topic"] || m.Topic != ""
					shapes["headers"] = shapes["headers"] || len(m.Headers) > 0
					shapes["binary"] = shapes["binary"] || m.ContentType == "application/octet-stream"
					shapes["no payload"] = shapes["no payload"] || m.Payload == nil
					shapes["version"] = shapes["version"] || m.AggregateVersion > 0
					shapes["schema version"] = shapes["schema version"] || m.SchemaVersion == 3
				}
			}
			mu.Unlock()
			if retried == 0 || untouched == 0 || len(tries) < wantPublished || len(shapes) != 6 {
				t.Fatalf("failure injection did not work: %d retried, %d untouched, %d events tried, shapes %v", retried, untouched, len(tries), shapes)
			}
			for shape, ok := range shapes {
				if !ok {
					t.Fatalf("no event with %s was tried twice", shape)
				}
			}
			// Attempts: a transient failure counts one, the others none.
			for _, m := range msgs {
				want := 1
				if m.Seq%5 == 0 && seen[m.ID.String()] > 1 {
					want = 2
				}
				if last := lastDelivery(msgs, m.ID.String()); last.Attempt != want {
					t.Fatalf("event seq %d delivered last as attempt %d, want %d", m.Seq, last.Attempt, want)
				}
			}

			var deadAfter string
			if err := pool.QueryRow(ctx, deadRows).Scan(&deadAfter); err != nil {
				t.Fatal(err)
			}
			if deadAfter != deadBefore {
				t.Fatalf("dead rows changed:\nbefore\n%s\nafter\n%s", deadBefore, deadAfter)
			}
			switch mode {
			case relay.DeleteOnPublish:
				if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE dead_at IS NULL`); n != 0 {
					t.Fatalf("%d published events left in delete-on-publish", n)
				}
			default:
				if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`); n != wantPublished {
					t.Fatalf("%d events marked published, want %d", n, wantPublished)
				}
				if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL AND attempts = 2`); n != retried {
					t.Fatalf("%d published events with 2 attempts, want %d (the transient failures)", n, retried)
				}
			}
			if st := r.Stats(); st.Published != int64(wantPublished) || st.SinkDownBatches == 0 {
				t.Fatalf("stats %+v: want Published %d and a sink-down batch", st, wantPublished)
			}
		})
	}
}

func lastDelivery(msgs []outbox.Message, id string) outbox.Message {
	var last outbox.Message
	for _, m := range msgs {
		if m.ID.String() == id {
			last = m
		}
	}
	return last
}

// orderNoting wraps a sink and notes, per Publish call, whether its ctx asked for order.
type orderNoting struct {
	outbox.Sink
	ordered, unordered atomic.Int64
}

func (s *orderNoting) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if outbox.OrderNeeded(ctx) {
		s.ordered.Add(1)
	} else {
		s.unordered.Add(1)
	}
	return s.Sink.Publish(ctx, msgs)
}

// An unordered relay tells its sink that a call needs no order (outbox.WithoutOrder), so a
// pipelining sink sends it in one wave; an ordered relay never does.
func TestPublishCallsSayWhetherTheyNeedOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("a", 5), 20)
			mem := &memsink.Sink{}
			sink := &orderNoting{Sink: mem}
			cfg := fastConfig()
			cfg.Mode = mode
			start(t, newRelay(t, pool, sink, cfg))
			waitFor(t, mem, 20*time.Second, "every event", distinct(100))
			ordered, unordered := sink.ordered.Load(), sink.unordered.Load()
			if mode == relay.Ordered && (ordered == 0 || unordered != 0) {
				t.Fatalf("ordered relay: %d calls needing order, %d not; want every call to need it", ordered, unordered)
			}
			if mode == relay.Unordered && (unordered == 0 || ordered != 0) {
				t.Fatalf("unordered relay: %d calls needing order, %d not; want none to need it", ordered, unordered)
			}
		})
	}
}
