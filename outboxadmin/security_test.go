package outboxadmin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
)

// mutations are the state-changing requests, with valid bodies.
func mutations(id string) []struct{ path, body string } {
	return []struct{ path, body string }{
		{"/api/replay", `{"filter":{"aggregate_id":"a0"},"actor":"ops","reason":"fixed"}`},
		{"/api/discard", `{"filter":{"aggregate_id":"a1"},"actor":"ops","reason":"obsolete"}`},
		{"/api/events/" + id + "/replay", `{"actor":"ops","reason":"fixed"}`},
		{"/api/events/" + id + "/discard", `{"actor":"ops","reason":"obsolete"}`},
		{"/api/pause", `{"scope":{"kind":"all"},"actor":"ops","reason":"maintenance"}`},
		{"/api/resume", `{"scope":{"kind":"all"},"actor":"ops","reason":"done"}`},
	}
}

// Every state-changing request without the token, or with a wrong one (also one that is
// the token's prefix or has it as a prefix), is refused with 401 and changes nothing.
func TestStateChangesNeedTheToken(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.changed", aggregates("a", 2), 1)
	kill(t, pool, "a", 1)
	h := newAdmin(t, pool, func(o *outboxadmin.Options) { o.RateBurst = 100 }) // refused credentials count too
	id := oneDeadID(t, pool, "a0")
	for _, m := range mutations(id) {
		for _, auth := range []string{"", "wrong-token-0123456789abcdef", token[:len(token)-1], token + "x"} {
			code, body := call(t, h, http.MethodPost, m.path, auth, m.body)
			if code != http.StatusUnauthorized {
				t.Fatalf("POST %s with token %q: %d, want 401: %s", m.path, auth, code, body)
			}
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.dead_letters`); n != 2 {
		t.Fatalf("%d dead letters after refused requests, want 2", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays`); n != 0 {
		t.Fatalf("%d audit rows after refused requests", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.pauses`); n != 0 {
		t.Fatalf("%d pauses after refused requests", n)
	}
	// The token in a cookie (what a browser would send on its own) is not a credential.
	req := httpRequest(t, http.MethodPost, "/api/replay", mutations(id)[0].body)
	req.AddCookie(&http.Cookie{Name: "token", Value: token})
	req.Header.Set("Cookie", "token="+token+"; Authorization=Bearer "+token)
	if code := serve(h, req); code != http.StatusUnauthorized {
		t.Fatalf("token in a cookie: %d, want 401", code)
	}
	// With the token: done.
	callJSON(t, h, http.MethodPost, "/api/replay", token, mutations(id)[0].body, http.StatusOK, nil)
}

// In read-only mode every state-changing request is refused with 403, with the token too;
// reads work.
func TestReadOnlyRefusesChanges(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.changed", aggregates("a", 2), 1)
	kill(t, pool, "a", 1)
	h := newAdmin(t, pool, func(o *outboxadmin.Options) { o.ReadOnly = true })
	id := oneDeadID(t, pool, "a0")
	for _, m := range mutations(id) {
		for _, auth := range []string{"", token} {
			if code, body := call(t, h, http.MethodPost, m.path, auth, m.body); code != http.StatusForbidden {
				t.Fatalf("read-only POST %s (token %q): %d, want 403: %s", m.path, auth, code, body)
			}
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.dead_letters`); n != 2 {
		t.Fatalf("%d dead letters after read-only requests, want 2", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.pauses`); n != 0 {
		t.Fatalf("%d pauses after read-only requests", n)
	}
	if html := page(t, h, "/pauses"); strings.Contains(html, `<form method="post"`) {
		t.Fatal("a read-only pauses page shows a state-changing form")
	}
	var st outboxadmin.Status
	callJSON(t, h, http.MethodGet, "/api/status", "", nil, http.StatusOK, &st)
	if st.Dead != 2 {
		t.Fatalf("status dead %d, want 2", st.Dead)
	}
	// A read-only handler needs no token; any other does.
	if _, err := outboxadmin.New(outboxadmin.Options{Pool: pool, ReadOnly: true}); err != nil {
		t.Fatalf("read-only without a token: %v", err)
	}
	for _, tok := range []string{"", "short"} {
		if _, err := outboxadmin.New(outboxadmin.Options{Pool: pool, Token: tok}); err == nil || !strings.Contains(err.Error(), "Token") {
			t.Fatalf("New with token %q: %v, want an error naming Token", tok, err)
		}
	}
}

// Unknown events and paths are 404; a malformed id is 400; a GET of a state-changing
// path is 405.
func TestNotFound(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	h := newAdmin(t, pool, nil)
	missing := "0190b1f4-0000-7000-8000-000000000000"
	for _, c := range []struct {
		method, path, auth, body string
		want                     int
	}{
		{http.MethodGet, "/api/events/" + missing, "", "", http.StatusNotFound},
		{http.MethodPost, "/api/events/" + missing + "/replay", token, `{"actor":"ops","reason":"r"}`, http.StatusNotFound},
		{http.MethodPost, "/api/events/" + missing + "/discard", token, `{"actor":"ops","reason":"r"}`, http.StatusNotFound},
		{http.MethodGet, "/api/nothing-here", "", "", http.StatusNotFound},
		{http.MethodGet, "/api/events/not-a-uuid", "", "", http.StatusBadRequest},
		{http.MethodGet, "/api/replay", "", "", http.StatusMethodNotAllowed},
		{http.MethodGet, "/no-such-page", "", "", http.StatusNotFound},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		if code, b := call(t, h, c.method, c.path, c.auth, body); code != c.want {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, code, c.want, b)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays`); n != 0 {
		t.Fatalf("%d audit rows for events that do not exist", n)
	}
}

// A body over MaxBodyBytes is refused with 413, whether its length is announced or it
// comes chunked; one just under is read.
func TestBodySizeLimit(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	h := newAdmin(t, pool, func(o *outboxadmin.Options) { o.MaxBodyBytes = 2048 })
	pad := func(n int) string {
		return `{"filter":{"aggregate_id":"x"},"actor":"ops","reason":"` + strings.Repeat("r", n) + `"}`
	}
	if code, b := call(t, h, http.MethodPost, "/api/replay", token, pad(3000)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("announced 3 KB body: %d, want 413: %s", code, b)
	}
	req := httpRequest(t, http.MethodPost, "/api/replay", pad(3000))
	req.ContentLength = -1 // chunked: only the bounded reader can catch it
	req.Header.Set("Authorization", "Bearer "+token)
	if code := serve(h, req); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked 3 KB body: %d, want 413", code)
	}
	callJSON(t, h, http.MethodPost, "/api/replay", token, pad(1900), http.StatusOK, nil)
}

// State-changing requests past the burst are refused with 429 and a Retry-After; a
// refused credential spends the budget too, so the token cannot be guessed at speed.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	h := newAdmin(t, pool, func(o *outboxadmin.Options) { o.RateLimit = 0.001; o.RateBurst = 3 })
	body := `{"filter":{"aggregate_id":"x"},"actor":"ops","reason":"r"}`
	for i := range 3 {
		auth := token
		if i == 0 {
			auth = "guess-guess-guess-guess"
		}
		if code, b := call(t, h, http.MethodPost, "/api/replay", auth, body); code == http.StatusTooManyRequests {
			t.Fatalf("request %d within the burst: 429: %s", i, b)
		}
	}
	req := httpRequest(t, http.MethodPost, "/api/replay", body)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := serveRecorder(h, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("request past the burst: %d (Retry-After %q), want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Reads are not limited.
	callJSON(t, h, http.MethodGet, "/api/status", "", nil, http.StatusOK, nil)
}

// Every answer forbids framing and sniffing and sets no cookie.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	h := newAdmin(t, pool, nil)
	rec := serveRecorder(h, httpRequest(t, http.MethodGet, "/api/status", ""))
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"} {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(rec.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q does not forbid framing", rec.Header().Get("Content-Security-Policy"))
	}
	if c := rec.Header().Values("Set-Cookie"); len(c) > 0 {
		t.Errorf("cookies set: %v", c)
	}
}
