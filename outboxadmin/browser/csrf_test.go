package browser_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
)

// A page on another site that posts the replay form to the admin — even one that knew the
// token — is refused: the real browser marks the request cross-site (Sec-Fetch-Site), and
// the admin answers 403 and changes nothing. (Without the token it would be 401 anyway:
// the browser holds no credential to attach, ADR 0021.)
func TestCrossSiteFormIsRefused(t *testing.T) {
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("c", 1), 1)
	var id string
	if err := pool.QueryRow(t.Context(), `UPDATE outbox.events SET dead_at = now() RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	admin, err := outboxadmin.New(outboxadmin.Options{Pool: pool, Token: token, PathPrefix: "/outbox/"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", admin)
	srv := httptest.NewServer(mux) // http://127.0.0.1:port
	t.Cleanup(srv.Close)
	target := srv.URL + "/outbox/ui/replay"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><html lang="en"><title>win a prize</title><form method="post" action="%s">
<input type="hidden" name="id" value="%s"><input type="hidden" name="actor" value="mallory">
<input type="hidden" name="reason" value="csrf"><input type="hidden" name="token" value="%s">
</form><script>document.forms[0].submit()</script></html>`, html.EscapeString(target), id, token)
	}))
	t.Cleanup(evil.Close)
	// localhost and 127.0.0.1 are different sites to the browser.
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	ctx, cancel := context.WithTimeout(browser(t), 30*time.Second)
	defer cancel()
	must(t, chromedp.Do(ctx, chromedp.Navigate(evilURL), chromedp.WaitVisible(chromedp.CSS("main"))))
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.HasPrefix(loc, target) {
		t.Fatalf("the cross-site form landed on %q (%v), want the refusal at %s", loc, err, target)
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("error")))
	must(t, err)
	if !strings.Contains(msg, "cross-site") {
		t.Fatalf("the cross-site form landed on %q", msg)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays`); n != 0 {
		t.Fatalf("%d audit rows: the cross-site form replayed", n)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.dead_letters`); n != 1 {
		t.Fatal("the cross-site form replayed the dead event")
	}
}
