package cli_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// adminToken is the daemon tests' admin token: a secret, so it must appear in no output.
const (
	adminToken = "admin-token-5d1e8c2b7f40a9e3"
	carolToken = "carol-token-9a8b7c6d5e4f3a2b"
)

// TestDaemonServesTheAdmin: with admin.enabled, `outbox relay` serves outboxadmin under
// /outbox/ on http.listen beside /metrics: reads need nothing, a pause needs the token
// (401 without it, 201 with it, and every relay of the schema honours it); the token is
// never printed.
func TestDaemonServesTheAdmin(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	env := []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "out.jsonl"),
		"OUTBOX_HTTP_LISTEN=127.0.0.1:0", "OUTBOX_ADMIN_ENABLED=true", "OUTBOX_ADMIN_TOKEN=" + adminToken,
		"OUTBOX_ADMIN_OPERATORS=carol:" + carolToken,
		"OUTBOX_ADMIN_SHOW_PAYLOADS=true", "OUTBOX_REDACT_PATHS=$.card.number",
	}
	p := startInProcess(t, env)
	t.Cleanup(func() {
		noSecret(t, p.stdout.String()+p.stderr.String(), adminToken)
		noSecret(t, p.stdout.String()+p.stderr.String(), carolToken)
	})
	if code, body := p.get(t, "/outbox/api/status"); code != http.StatusOK || !strings.Contains(body, `"relays"`) {
		t.Fatalf("GET /outbox/api/status: %d %s", code, body)
	}
	if code, body := p.get(t, "/outbox/"); code != http.StatusOK || !strings.Contains(body, "<h1>") {
		t.Fatalf("GET /outbox/ (the dashboard): %d %s", code, body)
	}
	if code, _ := p.get(t, "/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics beside the admin: %d", code)
	}
	// redact.paths applies to the admin's event detail too
	var id string
	if err := pool.QueryRow(t.Context(), `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload, dead_at)
		VALUES (gen_random_uuid(), 'order', 'r1', 'order.paid', '{"card":{"number":"4111-PII","brand":"visa"}}', now()) RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if code, body := p.get(t, "/outbox/api/events/"+id); code != http.StatusOK || strings.Contains(body, "4111-PII") || !strings.Contains(body, "visa") {
		t.Fatalf("event detail with admin.show_payloads and redact.paths: %d %s", code, body)
	}
	pause := func(token string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+p.addr+"/outbox/api/pause",
			strings.NewReader(`{"scope":{"kind":"all"},"actor":"ops","reason":"maintenance"}`))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := pause(""); code != http.StatusUnauthorized {
		t.Fatalf("pause without the token: %d, want 401", code)
	}
	if code := pause(adminToken); code != http.StatusCreated {
		t.Fatalf("pause with the token: %d, want 201", code)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.pauses WHERE resumed_at IS NULL AND paused_by = 'ops'`); n != 1 {
		t.Fatalf("%d active pauses after the API's pause", n)
	}
	// carol's own token: the resume is recorded as carol's, not as the "ops" it names
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+p.addr+"/outbox/api/resume",
		strings.NewReader(`{"scope":{"kind":"all"},"actor":"ops","reason":"done"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+carolToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume with carol's token: %d", resp.StatusCode)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.pauses WHERE resumed_by = 'carol'`); n != 1 {
		t.Fatal("the resume is not recorded as carol's")
	}
}

// The admin's settings are refused by name: enabled without http.listen, or without a
// token and not read-only.
func TestAdminConfigRefused(t *testing.T) {
	t.Parallel()
	dsn, _ := database(t)
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"OUTBOX_HTTP_LISTEN=", "OUTBOX_ADMIN_ENABLED=true", "OUTBOX_ADMIN_READ_ONLY=true"}, "admin.enabled: the admin is served on http.listen, which is off"},
		{[]string{"OUTBOX_HTTP_LISTEN=127.0.0.1:0", "OUTBOX_ADMIN_ENABLED=true"}, "admin.token:"},
		{[]string{"OUTBOX_HTTP_LISTEN=127.0.0.1:0", "OUTBOX_ADMIN_ENABLED=true", "OUTBOX_ADMIN_TOKEN=short"}, "admin.token:"},
		{[]string{"OUTBOX_HTTP_LISTEN=127.0.0.1:0", "OUTBOX_ADMIN_ENABLED=true", "OUTBOX_ADMIN_OPERATORS=alice"}, "admin.operators: an entry must be name:token"},
		{[]string{"OUTBOX_HTTP_LISTEN=127.0.0.1:0", "OUTBOX_ADMIN_ENABLED=true", "OUTBOX_ADMIN_OPERATORS=alice:" + carolToken + ",alice:" + adminToken}, `admin.operators: operator "alice" is named twice`},
		{[]string{"OUTBOX_HTTP_LISTEN=127.0.0.1:0", "OUTBOX_ADMIN_ENABLED=true", "OUTBOX_ADMIN_OPERATORS=alice:short"}, `admin.operators: outboxadmin: Operators["alice"]`},
	} {
		env := append([]string{"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "out.jsonl")}, tc.env...)
		r := run(t, env, "relay")
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: want exit 2 naming %q\n%s", tc.env, tc.want, r)
		}
		noSecret(t, r.stdout+r.stderr, ":short")
	}
}
