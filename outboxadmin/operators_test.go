package outboxadmin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
)

const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef00"
)

// With Operators, each operator's own token authenticates them, and the audit records
// the operator the token names — not the actor the request claims — through the API
// and the forms; a token of no operator is refused.
func TestOperatorTokensNameTheActor(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.changed", aggregates("a", 2), 1)
	kill(t, pool, "a", 1)
	h := newAdmin(t, pool, func(o *outboxadmin.Options) {
		o.Token = ""
		o.Operators = map[string]string{"alice": aliceToken, "bob": bobToken}
	})
	if code, body := call(t, h, http.MethodPost, "/api/replay", token, `{"filter":{"aggregate_id":"a0"},"actor":"ops","reason":"r"}`); code != http.StatusUnauthorized {
		t.Fatalf("a token of no operator: %d %s, want 401", code, body)
	}
	callJSON(t, h, http.MethodPost, "/api/replay", aliceToken, `{"filter":{"aggregate_id":"a0"},"actor":"mallory","reason":"INC-1"}`, http.StatusOK, nil)
	callJSON(t, h, http.MethodPost, "/api/pause", bobToken, `{"scope":{"kind":"all"},"reason":"INC-2"}`, http.StatusCreated, nil)
	form := url.Values{"aggregate_id": {"a1"}, "expect": {"1"}, "actor": {"mallory"}, "reason": {"INC-3"}, "token": {bobToken}}
	if code, _, body := postForm(t, h, "/ui/discard", form, nil); code != http.StatusSeeOther {
		t.Fatalf("discard form: %d %s", code, body)
	}
	for sql, want := range map[string]string{
		`SELECT actor FROM outbox.replays WHERE reason = 'INC-1'`:    "alice",
		`SELECT paused_by FROM outbox.pauses WHERE reason = 'INC-2'`: "bob",
		`SELECT actor FROM outbox.replays WHERE reason = 'INC-3'`:    "bob",
	} {
		var got string
		if err := pool.QueryRow(t.Context(), sql).Scan(&got); err != nil || got != want {
			t.Errorf("%s: %q (%v), want %q", sql, got, err, want)
		}
	}
}

// With both the shared Token and Operators, a shared-token request cannot name an
// operator as its actor: only that operator's own token acts as them.
func TestSharedTokenCannotImpersonateAnOperator(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.changed", aggregates("a", 1), 1)
	kill(t, pool, "a", 1)
	h := newAdmin(t, pool, func(o *outboxadmin.Options) { o.Operators = map[string]string{"alice": aliceToken} })
	for _, actor := range []string{"alice", " Alice "} {
		if code, body := call(t, h, http.MethodPost, "/api/replay", token, `{"filter":{"aggregate_id":"a0"},"actor":"`+actor+`","reason":"r"}`); code != http.StatusBadRequest || !strings.Contains(string(body), "operator's name") {
			t.Errorf("shared token as %q: %d %s, want 400", actor, code, body)
		}
	}
	form := url.Values{"kind": {"all"}, "actor": {"alice"}, "reason": {"r"}, "token": {token}}
	if code, _, _ := postForm(t, h, "/ui/pause", form, nil); code != http.StatusBadRequest {
		t.Errorf("pause form with the shared token as alice: %d, want 400", code)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays`) + queryInt(t, pool, `SELECT count(*) FROM outbox.pauses`); n != 0 {
		t.Fatalf("%d audit rows after refused impersonations", n)
	}
	callJSON(t, h, http.MethodPost, "/api/replay", token, `{"filter":{"aggregate_id":"a0"},"actor":"ops","reason":"r"}`, http.StatusOK, nil)
}

// Operators' tokens are checked like Token, by name: too short, shared, or unnamed.
func TestOperatorTokensRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, tc := range []struct {
		o    outboxadmin.Options
		want string
	}{
		{outboxadmin.Options{Pool: pool, Operators: map[string]string{"alice": "short"}}, `Operators["alice"]: the token must be at least`},
		{outboxadmin.Options{Pool: pool, Operators: map[string]string{"alice": aliceToken, "bob": aliceToken}}, "every token must be distinct"},
		{outboxadmin.Options{Pool: pool, Token: aliceToken, Operators: map[string]string{"alice": aliceToken}}, "also Token's"},
		{outboxadmin.Options{Pool: pool, Operators: map[string]string{" ": aliceToken}}, "Operators: a name must be"},
		{outboxadmin.Options{Pool: pool, Token: "short", Operators: map[string]string{"alice": aliceToken}}, "Token must be at least"},
	} {
		if _, err := outboxadmin.New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v): %v, want %q", tc.o.Operators, err, tc.want)
		}
	}
}
