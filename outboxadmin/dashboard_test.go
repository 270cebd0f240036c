package outboxadmin_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
)

// page GETs path and returns the HTML, failing t unless the status is 200.
func page(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	code, b := call(t, h, http.MethodGet, path, "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d: %s", path, code, b)
	}
	return string(b)
}

// text returns the text of the element with the given id (no nested tags assumed).
func text(t *testing.T, html, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*>(?:<a [^>]*>)?([^<]*)`).FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no element #%s in:\n%s", id, html)
	}
	return m[1]
}

// postForm submits a dashboard form the way a browser does (same-origin), without
// following the redirect.
func postForm(t *testing.T, h http.Handler, path string, form url.Values, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req := httpRequest(t, http.MethodPost, path, form.Encode())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := serveRecorder(h, req)
	return rec.Code, rec.Header(), rec.Body.String()
}

// Every page renders, with the database's numbers, and the overview reloads itself.
func TestDashboardPages(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.created", aggregates("s", 7), 3)
	kill(t, pool, "s", 1)
	h := newAdmin(t, pool, nil)
	html := page(t, h, "/")
	for id, want := range map[string]string{"stat-pending": "14", "stat-dead": "7", "stat-blocked": "7"} {
		if got := text(t, html, id); got != want {
			t.Errorf("overview #%s: %q, want %q", id, got, want)
		}
	}
	if !strings.Contains(html, `http-equiv="refresh"`) {
		t.Error("the overview does not reload itself")
	}
	if html := page(t, h, "/types"); !strings.Contains(html, "<td>order.created</td><td class=\"num\">14</td>") {
		t.Errorf("types page:\n%s", html)
	}
	if html := page(t, h, "/partitions"); strings.Count(html, "<tr><td class=\"num\">") != 16 {
		t.Errorf("partitions page does not list 16 partitions:\n%s", html)
	}
	html = page(t, h, "/dead")
	if got := text(t, html, "matching"); !strings.HasPrefix(got, "7 dead letter") {
		t.Errorf("dead letters: %q", got)
	}
	if strings.Contains(html, `http-equiv="refresh"`) {
		t.Error("the dead letters page, which has forms, reloads itself (and would lose what the operator typed)")
	}
	page(t, h, "/blocked")
	page(t, h, "/audit")
	page(t, h, "/events/"+oneDeadID(t, pool, "s0"))
	if code, _ := call(t, h, http.MethodGet, "/assets/style.css", "", nil); code != http.StatusOK {
		t.Errorf("style.css: %d", code)
	}
	if code, _ := call(t, h, http.MethodGet, "/events/0190b1f4-0000-7000-8000-000000000000", "", nil); code != http.StatusNotFound {
		t.Errorf("page of a missing event: %d, want 404", code)
	}
}

// What events carry is escaped on the pages: an aggregate id with markup is text.
func TestDashboardEscapes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.created", []string{`<script>alert(1)</script>`}, 1)
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET dead_at = now(), last_error = '<img src=x onerror=alert(2)>'`); err != nil {
		t.Fatal(err)
	}
	h := newAdmin(t, pool, nil)
	for _, p := range []string{"/dead", "/blocked", "/events/" + queryIDs(t, pool)[0]} {
		if html := page(t, h, p); strings.Contains(html, "<script>alert") || strings.Contains(html, "<img src=x") {
			t.Fatalf("%s: markup from an event is not escaped:\n%s", p, html)
		}
	}
}

// A dashboard form needs the token in its field (401 without, or with the token only in
// a cookie or a header a browser would not send from a form), is refused from another
// site (403) and in read-only mode (403, and the page shows no form); with the token it
// replays, audits and redirects back with the outcome.
func TestDashboardForms(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, "order.created", aggregates("s", 2), 1)
	kill(t, pool, "s", 1)
	id := oneDeadID(t, pool, "s0")
	h := newAdmin(t, pool, nil)
	form := url.Values{"id": {id}, "actor": {"alice"}, "reason": {"fixed"}}
	if code, _, body := postForm(t, h, "/ui/replay", form, map[string]string{"Cookie": "token=" + token}); code != http.StatusUnauthorized {
		t.Fatalf("form without the token: %d, want 401: %s", code, body)
	}
	form.Set("token", token)
	if code, _, _ := postForm(t, h, "/ui/replay", form, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Fatalf("cross-site form: %d, want 403", code)
	}
	if code, _, _ := postForm(t, h, "/ui/replay", form, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Fatalf("form from another origin: %d, want 403", code)
	}
	noReason := url.Values{"id": {id}, "actor": {"alice"}, "token": {token}}
	if code, _, _ := postForm(t, h, "/ui/replay", noReason, nil); code != http.StatusBadRequest {
		t.Fatalf("form without a reason: %d, want 400", code)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays`); n != 0 {
		t.Fatalf("%d audit rows after refused forms", n)
	}
	code, hdr, body := postForm(t, h, "/ui/replay", form, nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/events/"+id+"?msg=") {
		t.Fatalf("replay form: %d, Location %q: %s", code, hdr.Get("Location"), body)
	}
	if html := page(t, h, hdr.Get("Location")); text(t, html, "event-state") != "pending" || !strings.Contains(text(t, html, "message"), "replay: 1 event") {
		t.Fatalf("after the replay, the event's page:\n%s", html)
	}
	// Bulk: the form confirms the count it showed.
	bulk := url.Values{"aggregate_type": {"order"}, "expect": {"5"}, "actor": {"bob"}, "reason": {"gone"}, "token": {token}}
	if code, _, _ := postForm(t, h, "/ui/discard", bulk, nil); code != http.StatusConflict {
		t.Fatalf("bulk discard with a stale count: %d, want 409", code)
	}
	bulk.Set("expect", "1")
	if code, _, body := postForm(t, h, "/ui/discard", bulk, nil); code != http.StatusSeeOther {
		t.Fatalf("bulk discard: %d: %s", code, body)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays`); n != 2 {
		t.Fatalf("%d audit rows, want 2", n)
	}
	if html := page(t, h, "/audit"); !strings.Contains(html, "<td>bob</td><td>gone</td>") {
		t.Fatalf("audit page:\n%s", html)
	}

	ro := newAdmin(t, pool, func(o *outboxadmin.Options) { o.ReadOnly = true })
	kill(t, pool, "s", 1)
	if html := page(t, ro, "/events/"+id); strings.Contains(html, "<form method=\"post\"") {
		t.Fatal("a read-only admin shows a state-changing form")
	}
	if code, _, _ := postForm(t, ro, "/ui/replay", form, nil); code != http.StatusForbidden {
		t.Fatalf("read-only form: %d, want 403", code)
	}
}

// TestStatusAfterLeasesReleased: a relay that stopped gave its leases back, which
// expire at '-infinity' (as do lease rows never taken); the status and the pages that
// show the partitions still answer, without an expiry for those partitions.
func TestStatusAfterLeasesReleased(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(t.Context(), `INSERT INTO outbox.leases (partition, owner, epoch, expires_at)
		SELECT p, NULL, 1, '-infinity' FROM generate_series(0, 15) AS p`); err != nil {
		t.Fatal(err)
	}
	h := newAdmin(t, pool, nil)
	var st outboxadmin.Status
	callJSON(t, h, http.MethodGet, "/api/status", "", nil, http.StatusOK, &st)
	for _, pc := range st.ByPartition {
		if pc.Expires != nil || pc.Leased {
			t.Errorf("partition %d: a released lease shows as leased %v, expiring %v", pc.Partition, pc.Leased, pc.Expires)
		}
	}
	page(t, h, "/")
	page(t, h, "/partitions")
}
