package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// writePath is one way of calling Enqueue: the pgx adapter with one event per call or
// with a batch, and the database/sql adapter likewise.
type writePath struct {
	name  string
	begin func(t *testing.T) (outbox.Tx, func(query string) error, func() error)
	batch bool // the event under test goes with a good one in one call
}

func writePaths(pool *pgxpool.Pool, db *sql.DB) []writePath {
	ctx := context.Background()
	pgxBegin := func(t *testing.T) (outbox.Tx, func(string) error, func() error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		return outbox.PgxTx(tx), func(q string) error { _, err := tx.Exec(ctx, q); return err }, func() error { return tx.Commit(ctx) }
	}
	sqlBegin := func(t *testing.T) (outbox.Tx, func(string) error, func() error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		return outbox.SQLTx(tx), func(q string) error { _, err := tx.ExecContext(ctx, q); return err }, tx.Commit
	}
	return []writePath{
		{"pgx-one", pgxBegin, false},
		{"pgx-batch", pgxBegin, true},
		{"sql-one", sqlBegin, false},
		{"sql-batch", sqlBegin, true},
	}
}

// hostileCases are inputs a sceptical user tries. With refused set, Enqueue must refuse
// the event with a ValidationError naming that field and leave the transaction usable;
// without, the event must be stored and delivered exactly as written.
var hostileCases = []struct {
	name    string
	mutate  func(e *outbox.Event)
	refused string
}{
	// numbers: a jsonb column would render 1e100000 at 100,001 digits; json keeps it as written
	{"huge exponent", func(e *outbox.Event) { e.Payload = []byte(`{"n":1e100000}`) }, ""},
	{"10,800 huge exponents", func(e *outbox.Event) { e.Payload = []byte("[" + strings.Repeat("1e100000,", 10799) + "1e100000]") }, ""},
	{"exponent beyond numeric", func(e *outbox.Event) { e.Payload = []byte(`[1e999999]`) }, "Payload"},
	// the payload as written: whitespace, key order, duplicate keys, spellings, a large body
	{"whitespace and key order", func(e *outbox.Event) { e.Payload = []byte("{ \"b\" : 1 ,\n\t\"a\":[ 2 ] }") }, ""},
	{"duplicate keys", func(e *outbox.Event) { e.Payload = []byte(`{"a":2,"a":3}`) }, ""},
	{"number and escape spellings", func(e *outbox.Event) { e.Payload = []byte(`[1e2, 1.50, -0, "\u00e9", "\/"]`) }, ""},
	{"just under the payload limit", func(e *outbox.Event) { e.Payload = []byte("[" + strings.Repeat("1,", 460798) + "1]") }, ""},
	{"binary with a text content type", func(e *outbox.Event) {
		e.ContentType, e.Payload = "text/plain; charset=utf-8", []byte("caf\xc3\xa9 \x00\xff")
	}, ""},
	// schema version: the column is a 32-bit integer
	{"schema version 2^32+3", func(e *outbox.Event) { e.SchemaVersion = 1<<32 + 3 }, "SchemaVersion"},
	{"schema version 2^31", func(e *outbox.Event) { e.SchemaVersion = 1 << 31 }, "SchemaVersion"},
	{"schema version max", func(e *outbox.Event) { e.SchemaVersion = math.MaxInt32 }, ""},
	// traceparent
	{"traceparent with NUL after a valid prefix", func(e *outbox.Event) { e.TraceParent = validTraceParent + "-\x00" }, "TraceParent"},
	{"traceparent with invalid UTF-8", func(e *outbox.Event) { e.TraceParent = validTraceParent + "-\xff" }, "TraceParent"},
	{"traceparent with a trailing CR", func(e *outbox.Event) { e.TraceParent = validTraceParent + "\r" }, "TraceParent"},
	{"traceparent version 00 with more fields", func(e *outbox.Event) { e.TraceParent = validTraceParent + "-ab" }, "TraceParent"},
	{"traceparent version ff", func(e *outbox.Event) { e.TraceParent = "ff" + validTraceParent[2:] }, "TraceParent"},
	{"traceparent all-zero trace id", func(e *outbox.Event) { e.TraceParent = "00-" + strings.Repeat("0", 32) + validTraceParent[35:] }, "TraceParent"},
	{"traceparent of a later version", func(e *outbox.Event) { e.TraceParent = "01" + validTraceParent[2:] + "-0a1b" }, ""},
	// times
	{"available in year 295000", func(e *outbox.Event) { e.AvailableAt = time.Date(295000, 1, 1, 0, 0, 0, 0, time.UTC) }, "AvailableAt"},
	{"available in year 10000", func(e *outbox.Event) { e.AvailableAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "AvailableAt"},
	{"available in 1900", func(e *outbox.Event) { e.AvailableAt = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC) }, ""},
	// what becomes headers, subjects and routing keys
	{"CRLF in content type", func(e *outbox.Event) { e.ContentType = "application/json\r\nX-Injected: 1" }, "ContentType"},
	{"content type that is no media type", func(e *outbox.Event) { e.ContentType = "json" }, "ContentType"},
	{"LF in event type", func(e *outbox.Event) { e.EventType = "order.paid\nX: 1" }, "EventType"},
	{"space in event type", func(e *outbox.Event) { e.EventType = "order paid" }, "EventType"},
	{"wildcard in event type", func(e *outbox.Event) { e.EventType = "order.*" }, "EventType"},
	{"wildcard in aggregate type", func(e *outbox.Event) { e.AggregateType = "order>" }, "AggregateType"},
	{"tab in aggregate id", func(e *outbox.Event) { e.AggregateID = "o\t1" }, "AggregateID"},
	{"CR in topic", func(e *outbox.Event) { e.Topic = "orders\r" }, "Topic"},
	{"space in topic", func(e *outbox.Event) { e.Topic = "orders v2" }, "Topic"},
	{"wildcard in topic", func(e *outbox.Event) { e.Topic = "orders.>" }, "Topic"},
	{"empty token in topic", func(e *outbox.Event) { e.Topic = "orders..v2" }, "Topic"},
	{"topic over 249 bytes", func(e *outbox.Event) { e.Topic = strings.Repeat("t", 250) }, "Topic"},
	{"CRLF in a header value", func(e *outbox.Event) { e.Headers = map[string]string{"x-a": "1\r\nInjected: yes"} }, "Headers[x-a]"},
	{"what every field may hold", func(e *outbox.Event) {
		e.AggregateType, e.AggregateID, e.EventType = "Ordre_de-vente:v2", e.AggregateID+" client 42/é", "commande.créée"
		e.Topic, e.ContentType = "orders.v2_eu-west", "application/vnd.acme.order+json; charset=utf-8"
		e.Headers = map[string]string{"x-tenant": "acme é", "x-trace": "\t tab ok"}
	}, ""},
}

const validTraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// Every hostile input on every write path: refused with a ValidationError naming the
// field, the caller's transaction still usable (a statement and the commit run after the
// error), nothing written — or accepted, stored at exactly its length as PostgreSQL
// renders it, and delivered by a relay byte for byte.
func TestHostileInputOnEveryWritePath(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	sent := map[string]outbox.Event{} // accepted events by aggregate id
	for _, path := range writePaths(pool, db) {
		for i, tc := range hostileCases {
			id := fmt.Sprintf("%s-%d", path.name, i)
			e := outbox.Event{AggregateType: "order", AggregateID: id, EventType: "order.changed", Payload: []byte(`{}`)}
			tc.mutate(&e)
			e.ID = outbox.NewID()
			tx, exec, commit := path.begin(t)
			if err := exec(`INSERT INTO orders VALUES ('` + id + `', 1)`); err != nil {
				t.Fatalf("%s/%s: business insert: %v", path.name, tc.name, err)
			}
			events := []outbox.Event{e}
			if path.batch {
				events = append([]outbox.Event{{ID: outbox.NewID(), AggregateType: "order", AggregateID: "good-" + id, EventType: "order.changed"}}, e)
			}
			err := outbox.Enqueue(ctx, tx, events...)
			var verr *outbox.ValidationError
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("%s/%s: refused: %v", path.name, tc.name, err)
			case tc.refused != "" && (!errors.As(err, &verr) || verr.Field != tc.refused || verr.Index != len(events)-1):
				t.Errorf("%s/%s: err = %v, want a ValidationError for field %s of event %d", path.name, tc.name, err, tc.refused, len(events)-1)
			}
			if err := exec(`UPDATE orders SET total = 2 WHERE id = '` + id + `'`); err != nil {
				t.Fatalf("%s/%s: the transaction is not usable after Enqueue: %v", path.name, tc.name, err)
			}
			if err := commit(); err != nil {
				t.Fatalf("%s/%s: commit: %v", path.name, tc.name, err)
			}
			ids := make([]string, len(events))
			for j, ev := range events {
				ids[j] = ev.ID.String()
			}
			stored := count(t, pool, `SELECT count(*) FROM outbox.events WHERE id = ANY($1::uuid[])`, ids)
			switch {
			case tc.refused != "" && stored != 0:
				t.Errorf("%s/%s: a refused call wrote %d events", path.name, tc.name, stored)
			case tc.refused == "" && stored != len(events):
				t.Errorf("%s/%s: %d events stored, want %d", path.name, tc.name, stored, len(events))
			case tc.refused == "":
				// PostgreSQL's own rendering of the payload is the payload as written.
				var n int
				if err := pool.QueryRow(ctx, `SELECT coalesce(octet_length(convert_to(payload::text, 'UTF8')), octet_length(payload_bytes), 0)
					FROM outbox.events WHERE id = $1`, e.ID).Scan(&n); err != nil || n != len(e.Payload) {
					t.Errorf("%s/%s: stored payload renders as %d bytes (%v), written %d", path.name, tc.name, n, err, len(e.Payload))
				}
				sent[e.AggregateID] = e
			}
		}
	}

	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{Mode: relay.Unordered, PollInterval: 20 * time.Millisecond, FallbackPollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { stop(); <-done }()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	want := count(t, pool, `SELECT count(*) FROM outbox.events`)
	if err := sink.WaitFor(waitCtx, want); err != nil {
		t.Fatalf("%d of %d events delivered: %v", len(sink.Messages()), want, err)
	}
	for _, m := range sink.Messages() {
		e, ok := sent[m.AggregateID]
		if !ok {
			continue // a batch's good event
		}
		wantVersion := max(e.SchemaVersion, 1)
		wantContentType := e.ContentType
		if wantContentType == "" {
			wantContentType = outbox.ContentTypeJSON
		}
		if string(m.Payload) != string(e.Payload) || m.EventType != e.EventType || m.AggregateType != e.AggregateType ||
			m.Topic != e.Topic || m.ContentType != wantContentType || m.TraceParent != e.TraceParent || m.SchemaVersion != wantVersion ||
			len(e.Headers) > 0 && !reflect.DeepEqual(m.Headers, e.Headers) {
			t.Errorf("event %s delivered changed:\n got %+v\nwant %+v", m.AggregateID, brief(m), e)
		}
	}
}

// brief is a message without a long payload, for failure messages.
func brief(m outbox.Message) outbox.Message {
	if len(m.Payload) > 200 {
		m.Payload = append(m.Payload[:200:200], "…"...)
	}
	return m
}

// Whatever the fuzzer makes of an event, Enqueue refuses it with a ValidationError and
// leaves the transaction usable, or stores it so that it reads back as written — never a
// server error. Seeded with the hostile cases; `make fuzz` runs it for longer.
func FuzzEnqueueValidation(f *testing.F) {
	for _, tc := range hostileCases {
		e := outbox.Event{AggregateType: "order", AggregateID: "o1", EventType: "order.changed", Payload: []byte(`{}`)}
		tc.mutate(&e)
		if len(e.Payload) > 2000 {
			continue // the fuzzer's corpus stays small
		}
		hk, hv := "", ""
		for k, v := range e.Headers {
			hk, hv = k, v
		}
		f.Add(e.AggregateType, e.AggregateID, e.EventType, e.Topic, e.ContentType, e.Payload, hk, hv, e.TraceParent, int64(e.SchemaVersion), e.AvailableAt.Unix())
	}
	pool := pgtest.Pool(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, aggType, aggID, eventType, topic, contentType string, payload []byte, headerName, headerValue, traceParent string, schemaVersion, availableUnix int64) {
		e := outbox.Event{
			ID: outbox.NewID(), AggregateType: aggType, AggregateID: aggID, EventType: eventType, Topic: topic,
			ContentType: contentType, Payload: payload, TraceParent: traceParent, SchemaVersion: int(schemaVersion),
		}
		if headerName != "" {
			e.Headers = map[string]string{headerName: headerValue}
		}
		if availableUnix != 0 {
			e.AvailableAt = time.Unix(availableUnix, 0)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			err := outbox.Enqueue(ctx, outbox.PgxTx(tx), e)
			var verr *outbox.ValidationError
			if err != nil && !errors.As(err, &verr) {
				return fmt.Errorf("enqueue failed without a ValidationError: %w", err)
			}
			if _, serr := tx.Exec(ctx, `SELECT 1`); serr != nil {
				return fmt.Errorf("transaction unusable after Enqueue (%w): %w", err, serr)
			}
			if err != nil {
				return nil
			}
			var stored []byte
			if err := tx.QueryRow(ctx, `SELECT coalesce(convert_to(payload::text, 'UTF8'), payload_bytes, ''::bytea) FROM outbox.events WHERE id = $1`, e.ID).Scan(&stored); err != nil {
				return fmt.Errorf("read back: %w", err)
			}
			if string(stored) != string(payload) {
				return fmt.Errorf("payload read back as %q, written %q", stored, payload)
			}
			return errRollBack
		})
		if err != nil && !errors.Is(err, errRollBack) {
			t.Fatal(err)
		}
	})
}

var errRollBack = errors.New("roll back")
