package outboxadmin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const token = "test-token-0123456789abcdef"

// newAdmin returns a handler on pool with the test token; edit adjusts the options.
func newAdmin(t testing.TB, pool *pgxpool.Pool, edit func(*outboxadmin.Options)) *outboxadmin.Handler {
	t.Helper()
	o := outboxadmin.Options{Pool: pool, Token: token}
	if edit != nil {
		edit(&o)
	}
	h, err := outboxadmin.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// call sends one request to h and returns the status and the body. auth "" sends no
// Authorization header; body nil sends none, a string is sent as is, anything else as JSON.
func call(t testing.TB, h http.Handler, method, path, auth string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequestWithContext(t.Context(), method, path, rd)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// callJSON is call that also decodes the answer into out (when not nil) and fails t
// unless the status is want.
func callJSON(t testing.TB, h http.Handler, method, path, auth string, body any, want int, out any) {
	t.Helper()
	code, b := call(t, h, method, path, auth, body)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// enqueue writes perAggregate events (versions 1…n) for each aggregate, of eventType.
func enqueue(t testing.TB, pool *pgxpool.Pool, eventType string, aggregates []string, perAggregate int) {
	t.Helper()
	ctx := context.Background()
	var events []outbox.Event
	for v := 1; v <= perAggregate; v++ {
		for _, a := range aggregates {
			events = append(events, outbox.Event{
				AggregateType: "order", AggregateID: a, AggregateVersion: int64(v), EventType: eventType,
				Payload: []byte(fmt.Sprintf(`{"v":%d,"card":"4111-secret"}`, v)), Headers: map[string]string{"tenant": "acme-secret"},
			})
		}
	}
	for len(events) > 0 {
		chunk := events[:min(500, len(events))]
		events = events[len(chunk):]
		if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), chunk...) }); err != nil {
			t.Fatal(err)
		}
	}
}

// kill marks dead, as a relay would after a permanent failure, the events of aggregates
// prefixed prefix with a version up to maxVersion (a fixture shortcut: making 2,000
// events dead through a failing sink takes far longer and tests the relay, not the admin).
func kill(t testing.TB, pool *pgxpool.Pool, prefix string, maxVersion int) int {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `UPDATE outbox.events SET dead_at = now(), attempts = 1, last_error = 'refused: 422'
		WHERE aggregate_id LIKE $1 || '%' AND aggregate_version <= $2`, prefix, maxVersion)
	if err != nil {
		t.Fatal(err)
	}
	return int(tag.RowsAffected())
}

func aggregates(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func queryInt(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// oneDeadID returns the id of a dead event of aggregate agg.
func oneDeadID(t testing.TB, pool *pgxpool.Pool, agg string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `SELECT id::text FROM outbox.events WHERE aggregate_id = $1 AND dead_at IS NOT NULL ORDER BY seq LIMIT 1`, agg).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func httpRequest(t testing.TB, method, path, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	return httptest.NewRequestWithContext(t.Context(), method, path, rd)
}

func serveRecorder(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func serve(h http.Handler, req *http.Request) int { return serveRecorder(h, req).Code }
