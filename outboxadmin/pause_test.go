package outboxadmin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/relay"
)

// Pause and resume through the API: made once (201), a second pause of the scope
// changes nothing (200, made false), the status and the list show it, a bad scope is
// refused by name (400), resuming what is not paused is a conflict (409), and the
// history keeps who resumed and why.
func TestPauseThroughTheAPI(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	h := newAdmin(t, pool, nil)
	body := `{"scope":{"kind":"aggregate_type","aggregate_type":"payment"},"actor":"ops","reason":"PSP down"}`
	var res outboxadmin.PauseResult
	callJSON(t, h, http.MethodPost, "/api/pause", token, body, http.StatusCreated, &res)
	if !res.Made || res.Pause.Scope.AggregateType != "payment" || res.Pause.By != "ops" {
		t.Fatalf("pause: %+v", res)
	}
	callJSON(t, h, http.MethodPost, "/api/pause", token, strings.Replace(body, "PSP down", "again", 1), http.StatusOK, &res)
	if res.Made || res.Pause.Reason != "PSP down" {
		t.Fatalf("second pause: %+v, want the first one standing", res)
	}
	var st outboxadmin.Status
	callJSON(t, h, http.MethodGet, "/api/status", "", nil, http.StatusOK, &st)
	if len(st.Pauses) != 1 || st.Pauses[0].Scope.Kind != relay.PauseAggregateType {
		t.Fatalf("status pauses: %+v", st.Pauses)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"scope":{"kind":"tenant"},"actor":"ops","reason":"r"}`, "Scope.Kind"},
		{`{"scope":{"kind":"partition","partition":99},"actor":"ops","reason":"r"}`, "no such relay partition"},
		{`{"scope":{"kind":"aggregate_type"},"actor":"ops","reason":"r"}`, `needs \"aggregate_type\"`},
		{`{"scope":{"kind":"aggregate_type","aggregate_type":""},"actor":"ops","reason":"r"}`, "Scope.AggregateType"},
		{`{"scope":{"kind":"all"},"actor":"ops"}`, "reason"},
		{`{"scope":{"kind":"all","tenant":"x"},"actor":"ops","reason":"r"}`, "tenant"},
		{`{"scope":{"kind":"partition"},"actor":"ops","reason":"r"}`, `kind \"partition\" needs \"partition\"`},
	} {
		if code, b := call(t, h, http.MethodPost, "/api/pause", token, tc.body); code != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("POST /api/pause %s: %d %s, want 400 naming %s", tc.body, code, b, tc.want)
		}
	}
	callJSON(t, h, http.MethodPost, "/api/resume", token, `{"scope":{"kind":"aggregate_type","aggregate_type":"payment"},"actor":"ops","reason":"PSP back"}`, http.StatusOK, &res)
	if res.Pause.ResumedBy != "ops" || res.Pause.ResumeReason != "PSP back" || res.Pause.ResumedAt == nil {
		t.Fatalf("resume: %+v", res)
	}
	if code, b := call(t, h, http.MethodPost, "/api/resume", token, `{"scope":{"kind":"all"},"actor":"ops","reason":"r"}`); code != http.StatusConflict || !strings.Contains(string(b), "all is not paused") {
		t.Fatalf("resume of a scope not paused: %d %s, want 409", code, b)
	}
	var list outboxadmin.Page[relay.Paused]
	callJSON(t, h, http.MethodGet, "/api/pauses", "", nil, http.StatusOK, &list)
	if len(list.Items) != 0 {
		t.Fatalf("active pauses after the resume: %+v", list.Items)
	}
	callJSON(t, h, http.MethodGet, "/api/pauses?history=true", "", nil, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].ResumeReason != "PSP back" {
		t.Fatalf("pause history: %+v", list.Items)
	}
}

// The pauses page: the pause form pauses (the overview then says so), each active pause
// has a resume form, and the history shows both; the forms pass the token and origin
// checks of every form.
func TestPauseThroughTheDashboard(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	h := newAdmin(t, pool, nil)
	form := url.Values{"kind": {"partition"}, "partition": {"3"}, "aggregate_type": {""}, "actor": {"alice"}, "reason": {"consumer 3 broken"}}
	if code, _, _ := postForm(t, h, "/ui/pause", form, nil); code != http.StatusUnauthorized {
		t.Fatalf("pause form without the token: %d, want 401", code)
	}
	form.Set("token", token)
	if code, _, _ := postForm(t, h, "/ui/pause", form, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Fatalf("cross-site pause form: %d, want 403", code)
	}
	if code, _, _ := postForm(t, h, "/ui/pause", form, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Fatalf("pause form from another origin: %d, want 403", code)
	}
	ro := newAdmin(t, pool, func(o *outboxadmin.Options) { o.ReadOnly = true })
	for _, path := range []string{"/ui/pause", "/ui/resume"} {
		if code, _, _ := postForm(t, ro, path, form, nil); code != http.StatusForbidden {
			t.Fatalf("read-only %s: %d, want 403", path, code)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.pauses`); n != 0 {
		t.Fatalf("%d pauses after refused forms", n)
	}
	code, hdr, body := postForm(t, h, "/ui/pause", form, nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/pauses?msg=") {
		t.Fatalf("pause form: %d, Location %q: %s", code, hdr.Get("Location"), body)
	}
	html := page(t, h, hdr.Get("Location"))
	if !strings.Contains(text(t, html, "message"), "paused partition 3") || !strings.Contains(html, "<td>partition 3</td>") || !strings.Contains(html, `action="/ui/resume"`) {
		t.Fatalf("pauses page after the pause:\n%s", html)
	}
	if ov := page(t, h, "/"); !strings.Contains(ov, "Paused: partition 3") {
		t.Fatalf("the overview does not show the pause:\n%s", ov)
	}
	resume := url.Values{"kind": {"partition"}, "partition": {"3"}, "aggregate_type": {""}, "actor": {"bob"}, "reason": {"fixed"}, "token": {token}}
	code, hdr, body = postForm(t, h, "/ui/resume", resume, nil)
	if code != http.StatusSeeOther {
		t.Fatalf("resume form: %d: %s", code, body)
	}
	html = page(t, h, hdr.Get("Location"))
	if !strings.Contains(text(t, html, "message"), "resumed partition 3") || !strings.Contains(html, "Nothing is paused.") || !strings.Contains(html, "<td>bob</td><td>fixed</td>") {
		t.Fatalf("pauses page after the resume:\n%s", html)
	}
	if code, _, _ := postForm(t, h, "/ui/resume", resume, nil); code != http.StatusConflict {
		t.Fatalf("resume form for a scope not paused: %d, want 409", code)
	}
}
