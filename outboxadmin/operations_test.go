package outboxadmin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// A replay or discard needs an actor and a reason, and is audited: who, when, why, which
// filter, how many, which ids.
func TestChangesAreAudited(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.changed", aggregates("a", 3), 2)
	kill(t, pool, "a", 2)
	h := newAdmin(t, pool, nil)
	for _, body := range []string{
		`{"filter":{"aggregate_id":"a0"},"actor":"ops"}`,
		`{"filter":{"aggregate_id":"a0"},"reason":"fixed"}`,
		`{"filter":{"aggregate_id":"a0"},"actor":" ","reason":"fixed"}`,
	} {
		callJSON(t, h, http.MethodPost, "/api/replay", token, body, http.StatusBadRequest, nil)
	}
	var res outboxadmin.Result
	callJSON(t, h, http.MethodPost, "/api/replay", token, `{"filter":{"aggregate_id":"a0"},"actor":"alice","reason":"sink fixed, INC-42"}`, http.StatusOK, &res)
	if res.Affected != 2 || res.AuditID == 0 {
		t.Fatalf("replay: %+v, want 2 affected and an audit row", res)
	}
	id := oneDeadID(t, pool, "a1")
	callJSON(t, h, http.MethodPost, "/api/events/"+id+"/discard", token, `{"actor":"bob","reason":"obsolete"}`, http.StatusOK, &res)
	if res.Affected != 1 {
		t.Fatalf("discard one: %+v", res)
	}
	var action, actor, reason, filter string
	var n int
	var at time.Time
	err := pool.QueryRow(context.Background(), `SELECT action, actor, reason, cardinality(event_ids), filter::text, created_at
		FROM outbox.replays WHERE id = (SELECT min(id) FROM outbox.replays)`).Scan(&action, &actor, &reason, &n, &filter, &at)
	if err != nil {
		t.Fatal(err)
	}
	if action != "replay" || actor != "alice" || reason != "sink fixed, INC-42" || n != 2 || filter != `{"aggregate_id": "a0"}` || time.Since(at) > time.Minute {
		t.Fatalf("audit row: %s %s %q %d %s %s", action, actor, reason, n, filter, at)
	}
	if got := queryInt(t, pool, `SELECT count(*) FROM outbox.replays WHERE action = 'discard' AND actor = 'bob' AND event_ids = ARRAY[$1::uuid]`, id); got != 1 {
		t.Fatal("no audit row for the single discard")
	}
	// The audit log and the event's detail show them.
	var audit outboxadmin.Page[outboxadmin.AuditEntry]
	callJSON(t, h, http.MethodGet, "/api/audit", "", nil, http.StatusOK, &audit)
	if len(audit.Items) != 2 || audit.Items[0].Actor != "bob" || audit.Items[1].Count != 2 || string(audit.Items[1].Filter) != `{"aggregate_id":"a0"}` {
		t.Fatalf("audit log: %+v", audit.Items)
	}
	var d outboxadmin.EventDetail
	callJSON(t, h, http.MethodGet, "/api/events/"+id, "", nil, http.StatusOK, &d)
	if d.State != outboxadmin.StateDiscarded || len(d.Audit) != 1 || d.Audit[0].Reason != "obsolete" {
		t.Fatalf("detail of the discarded event: %+v", d)
	}
	// A discarded event cannot be replayed (its aggregate went on without it): 409.
	if code, b := call(t, h, http.MethodPost, "/api/events/"+id+"/replay", token, `{"actor":"bob","reason":"oops"}`); code != http.StatusConflict || !strings.Contains(string(b), "discarded") {
		t.Fatalf("replay of a discarded event: %d %s, want 409", code, b)
	}
}

// Bulk changes are set-based and guarded: an empty filter needs "all": true, a misspelt
// filter field is refused (it would widen the filter), a count other than the confirmed
// one or over MaxBulk changes nothing (409), and a dry run reports the count only.
func TestBulkGuards(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.changed", aggregates("a", 10), 1)
	kill(t, pool, "a", 1)
	h := newAdmin(t, pool, func(o *outboxadmin.Options) { o.MaxBulk = 5 })
	callJSON(t, h, http.MethodPost, "/api/replay", token, `{"actor":"ops","reason":"r"}`, http.StatusBadRequest, nil)
	callJSON(t, h, http.MethodPost, "/api/replay", token, `{"filter":{},"actor":"ops","reason":"r"}`, http.StatusBadRequest, nil)
	callJSON(t, h, http.MethodPost, "/api/replay", token, `{"filter":{"aggregate_type":"order","aggregateid":"a1"},"actor":"ops","reason":"r"}`, http.StatusBadRequest, nil)
	callJSON(t, h, http.MethodPost, "/api/replay", token, `{"all":true,"actor":"ops","reason":"r"}`, http.StatusConflict, nil) // 10 > MaxBulk
	var res outboxadmin.Result
	callJSON(t, h, http.MethodPost, "/api/discard", token, `{"filter":{"aggregate_id":"a1"},"actor":"ops","reason":"r","dry_run":true}`, http.StatusOK, &res)
	if res.Affected != 1 || !res.DryRun || res.AuditID != 0 {
		t.Fatalf("dry run: %+v", res)
	}
	callJSON(t, h, http.MethodPost, "/api/discard", token, `{"filter":{"aggregate_id":"a1"},"actor":"ops","reason":"r","expect":2}`, http.StatusConflict, nil)
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.dead_letters`); n != 10 {
		t.Fatalf("%d dead letters after refused and dry-run changes, want 10", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays`); n != 0 {
		t.Fatalf("%d audit rows after refused and dry-run changes", n)
	}
	callJSON(t, h, http.MethodPost, "/api/discard", token, `{"filter":{"aggregate_id":"a1"},"actor":"ops","reason":"r","expect":1}`, http.StatusOK, &res)
	if res.Affected != 1 {
		t.Fatalf("confirmed discard: %+v", res)
	}
}

// 2,000 dead events (500 aggregates, 4 dead and 2 pending behind each) are replayed in one
// call, which reports exactly 2,000 and audits them in one row; a relay then publishes all
// 3,000 in order per aggregate.
func TestBulkReplayOf2000KeepsOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.changed", aggregates("b", 500), 6)
	if n := kill(t, pool, "b", 4); n != 2000 {
		t.Fatalf("fixture: %d dead, want 2000", n)
	}
	enqueue(t, pool, "order.changed", aggregates("other", 5), 1) // not dead: untouched
	h := newAdmin(t, pool, nil)
	var res outboxadmin.Result
	callJSON(t, h, http.MethodPost, "/api/replay", token, `{"filter":{"aggregate_type":"order"},"actor":"ops","reason":"consumer fixed","dry_run":true}`, http.StatusOK, &res)
	if res.Affected != 2000 {
		t.Fatalf("dry run: %d, want 2000", res.Affected)
	}
	callJSON(t, h, http.MethodPost, "/api/replay", token, `{"filter":{"aggregate_type":"order"},"actor":"ops","reason":"consumer fixed","expect":2000}`, http.StatusOK, &res)
	if res.Affected != 2000 {
		t.Fatalf("replay: %d, want 2000", res.Affected)
	}
	if n := queryInt(t, pool, `SELECT cardinality(event_ids) FROM outbox.replays WHERE id = $1`, res.AuditID); n != 2000 {
		t.Fatalf("audit row names %d events, want 2000", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters left", n)
	}

	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{
		PollInterval: 20 * time.Millisecond, FallbackPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	wait, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	msgs, err := sink.WaitUntil(wait, func(msgs []outbox.Message) bool { return distinctIDs(msgs) == 3005 })
	if err != nil {
		t.Fatalf("waiting for 3005 events: %d delivered: %v", len(msgs), err)
	}
	checkOrder(t, msgs)
}

func distinctIDs(msgs []outbox.Message) int {
	seen := map[uuid.UUID]bool{}
	for _, m := range msgs {
		seen[m.ID] = true
	}
	return len(seen)
}

// checkOrder fails t unless, per aggregate, the first deliveries are in version order
// with no gap.
func checkOrder(t *testing.T, msgs []outbox.Message) {
	t.Helper()
	seen := map[uuid.UUID]bool{}
	last := map[string]int64{}
	for _, m := range msgs {
		if seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		k := m.AggregateType + "/" + m.AggregateID
		if m.AggregateVersion != last[k]+1 {
			t.Fatalf("aggregate %s: first delivery of version %d after version %d", k, m.AggregateVersion, last[k])
		}
		last[k] = m.AggregateVersion
	}
}

// The status's numbers are the database's.
func TestStatusCounts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.created", aggregates("s", 7), 3)
	enqueue(t, pool, "order.paid", aggregates("p", 4), 1)
	kill(t, pool, "s", 1) // 7 dead, holding 14
	if _, err := pool.Exec(context.Background(), `UPDATE outbox.events SET published_at = now() WHERE aggregate_id LIKE 'p%'`); err != nil {
		t.Fatal(err)
	}
	h := newAdmin(t, pool, nil)
	var st outboxadmin.Status
	callJSON(t, h, http.MethodGet, "/api/status", "", nil, http.StatusOK, &st)
	if st.Pending != 14 || st.Dead != 7 || st.BlockedAggregates != 7 || st.OldestPendingSeconds <= 0 {
		t.Fatalf("status: pending %d dead %d blocked %d oldest %v", st.Pending, st.Dead, st.BlockedAggregates, st.OldestPendingSeconds)
	}
	if st.Retention.TableBytes == 0 || st.Retention.IndexBytes == 0 || st.Retention.OldestRow == nil {
		t.Fatalf("retention: %+v", st.Retention)
	}
	if len(st.ByType) != 1 || st.ByType[0] != (outboxadmin.TypeCount{EventType: "order.created", Pending: 14, Dead: 7, OldestPendingSeconds: st.ByType[0].OldestPendingSeconds}) {
		t.Fatalf("by type: %+v", st.ByType)
	}
	var pending, dead int64
	for _, p := range st.ByPartition {
		pending += p.Pending
		dead += p.Dead
		want := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE partition * 16 / 4096 = $1 AND published_at IS NULL AND dead_at IS NULL`, p.Partition)
		if p.Pending != want {
			t.Fatalf("partition %d: %d pending, database %d", p.Partition, p.Pending, want)
		}
	}
	if len(st.ByPartition) != 16 || pending != 14 || dead != 7 {
		t.Fatalf("by partition: %d partitions, %d pending, %d dead", len(st.ByPartition), pending, dead)
	}
	var blocked outboxadmin.Page[outboxadmin.Blocked]
	callJSON(t, h, http.MethodGet, "/api/blocked", "", nil, http.StatusOK, &blocked)
	if len(blocked.Items) != 7 || blocked.Items[0].Held != 2 || blocked.Items[0].Dead != 1 {
		t.Fatalf("blocked: %+v", blocked.Items)
	}
}

// Pages of events follow one another by seq, without a gap or a repeat, under any filter.
func TestEventsPagination(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.created", aggregates("e", 25), 2)
	enqueue(t, pool, "order.paid", aggregates("f", 5), 1)
	h := newAdmin(t, pool, nil)
	var seen []int64
	next := ""
	for range 10 {
		var p outboxadmin.Page[outboxadmin.Event]
		callJSON(t, h, http.MethodGet, "/api/events?event_type=order.created&limit=7&after="+next, "", nil, http.StatusOK, &p)
		for _, e := range p.Items {
			if e.EventType != "order.created" || (len(seen) > 0 && e.Seq <= seen[len(seen)-1]) {
				t.Fatalf("event %+v after seq %v", e, seen)
			}
			seen = append(seen, e.Seq)
		}
		if next = p.Next; next == "" {
			break
		}
	}
	if len(seen) != 50 {
		t.Fatalf("%d events over the pages, want 50", len(seen))
	}
	var p outboxadmin.Page[outboxadmin.Event]
	callJSON(t, h, http.MethodGet, "/api/events?aggregate_id=e3&state=pending", "", nil, http.StatusOK, &p)
	if len(p.Items) != 2 {
		t.Fatalf("aggregate e3: %d events, want 2", len(p.Items))
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	callJSON(t, h, http.MethodGet, "/api/events?created_from="+future, "", nil, http.StatusOK, &p)
	if len(p.Items) != 0 {
		t.Fatalf("events created in the future: %d", len(p.Items))
	}
	for _, bad := range []string{"state=lost", "limit=0", "limit=100000", "after=-1", "created_from=yesterday", "id=nope"} {
		callJSON(t, h, http.MethodGet, "/api/events?"+bad, "", nil, http.StatusBadRequest, nil)
	}
}

// Payloads and header values are not shown unless ShowPayloads.
func TestPayloadsHiddenByDefault(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.created", []string{"x"}, 1)
	id := queryIDs(t, pool)[0]
	for _, show := range []bool{false, true} {
		h := newAdmin(t, pool, func(o *outboxadmin.Options) { o.ShowPayloads = show })
		code, b := call(t, h, http.MethodGet, "/api/events/"+id, "", nil)
		if code != http.StatusOK {
			t.Fatalf("detail: %d %s", code, b)
		}
		if got := strings.Contains(string(b), "secret"); got != show {
			t.Fatalf("ShowPayloads %v: secret shown %v: %s", show, got, b)
		}
		var d outboxadmin.EventDetail
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		if d.PayloadBytes == 0 || len(d.Headers) != 1 {
			t.Fatalf("detail: %+v", d)
		}
	}
}

func queryIDs(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id::text FROM outbox.events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A pending event is discarded by id; a bulk discard takes dead letters only, so the
// pending events its filter also matches stay pending; a published event is neither
// replayed nor discarded (409).
func TestDiscardPendingOnlyByID(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.created", aggregates("q", 3), 2)
	kill(t, pool, "q0", 1)
	h := newAdmin(t, pool, nil)
	var res outboxadmin.Result
	callJSON(t, h, http.MethodPost, "/api/discard", token, `{"filter":{"aggregate_type":"order"},"actor":"ops","reason":"r"}`, http.StatusOK, &res)
	if res.Affected != 1 {
		t.Fatalf("bulk discard: %d affected, want the 1 dead letter", res.Affected)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE discarded_at IS NULL AND dead_at IS NULL AND published_at IS NULL`); n != 5 {
		t.Fatalf("%d pending left, want 5", n)
	}
	var pending, published string
	if err := pool.QueryRow(context.Background(), `SELECT id::text FROM outbox.events WHERE aggregate_id = 'q1' AND aggregate_version = 1`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	callJSON(t, h, http.MethodPost, "/api/events/"+pending+"/discard", token, `{"actor":"ops","reason":"obsolete"}`, http.StatusOK, &res)
	if res.Affected != 1 {
		t.Fatalf("discard of a pending event: %+v", res)
	}
	if err := pool.QueryRow(context.Background(), `UPDATE outbox.events SET published_at = now() WHERE aggregate_id = 'q2' AND aggregate_version = 1 RETURNING id::text`).Scan(&published); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"replay", "discard"} {
		if code, b := call(t, h, http.MethodPost, "/api/events/"+published+"/"+a, token, `{"actor":"ops","reason":"r"}`); code != http.StatusConflict || !strings.Contains(string(b), "is published") {
			t.Fatalf("%s of a published event: %d %s, want 409", a, code, b)
		}
	}
}

// With ShowPayloads, the configured paths are redacted in the event detail (API and
// page), the rest shown as written; a bad path is refused by name.
func TestPayloadRedactPaths(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(t.Context(), `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES (gen_random_uuid(), 'order', 'r1', 'order.paid', '{"card":{"number":"4111-PII","brand":"visa"},"total":12.50}')`); err != nil {
		t.Fatal(err)
	}
	id := queryIDs(t, pool)[0]
	h := newAdmin(t, pool, func(o *outboxadmin.Options) { o.ShowPayloads, o.RedactPaths = true, []string{"$.card.number"} })
	for _, path := range []string{"/api/events/" + id, "/events/" + id} {
		code, b := call(t, h, http.MethodGet, path, "", nil)
		if code != http.StatusOK || strings.Contains(string(b), "4111-PII") || !strings.Contains(string(b), "visa") || !strings.Contains(string(b), "[redacted]") {
			t.Errorf("GET %s: %d, want the card number redacted and the rest shown:\n%s", path, code, b)
		}
	}
	if _, err := outboxadmin.New(outboxadmin.Options{Pool: pool, ReadOnly: true, RedactPaths: []string{"card.number"}}); err == nil || !strings.Contains(err.Error(), "RedactPaths[0]") {
		t.Errorf("a bad path: %v, want an error naming RedactPaths[0]", err)
	}
}
