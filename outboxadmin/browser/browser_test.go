package browser_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// chromium is Debian's package (apt-get install chromium); the test never downloads a browser.
const chromium = "/usr/bin/chromium"

const token = "browser-test-token-0123456789"

// browser starts a headless chromium for t and returns a context to drive it.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s: %v (install Debian's chromium: apt-get install -y chromium)", chromium, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser; no deadline on this first call
		t.Fatalf("start %s: %v", chromium, err)
	}
	// Every later action together within two minutes, so a page that never shows what a
	// step waits for fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// The dashboard in a real browser: every page loads, shows the database's numbers, is
// screenshotted (saved, checked not blank) and passes the accessibility checks; a dead
// event replayed through its page is then published by the relay and shown as such.
func TestDashboardInBrowser(t *testing.T) {
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("s", 7), 3)
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET dead_at = now(), attempts = 3, last_error = 'refused: 422 unprocessable'
		WHERE aggregate_version = 1`); err != nil {
		t.Fatal(err)
	}
	admin, err := outboxadmin.New(outboxadmin.Options{Pool: pool, Token: token, PathPrefix: "/outbox/"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", admin)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.URL + "/outbox/"

	sink := &memsink.Sink{}
	startRelay(t, pool, sink)

	ctx := browser(t)
	artifacts := t.ArtifactDir()

	// The overview's numbers are the database's (the relay holds the 14 pending events
	// behind the 7 dead ones, so they do not move meanwhile).
	must(t, chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(chromedp.ID("stat-pending"))))
	for id, sql := range map[string]string{
		"stat-pending": `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL`,
		"stat-dead":    `SELECT count(*) FROM outbox.dead_letters`,
		"stat-blocked": `SELECT count(DISTINCT aggregate_id) FROM outbox.dead_letters`,
	} {
		got, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		must(t, err)
		if want := fmt.Sprint(queryInt(t, pool, sql)); strings.TrimSpace(got) != want {
			t.Errorf("overview #%s shows %q, the database %s", id, got, want)
		}
	}
	must(t, chromedp.Do(ctx, chromedp.Navigate(base+"dead"), chromedp.WaitVisible(chromedp.ID("dead"))))
	deadRows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#dead tbody tr').length`))
	must(t, err)
	if deadRows != 7 {
		t.Errorf("dead letters page lists %d rows, the database 7", deadRows)
	}

	var id string
	if err := pool.QueryRow(t.Context(), `SELECT id::text FROM outbox.events WHERE aggregate_id = 's0' AND aggregate_version = 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	pagesToCheck := []string{"", "types", "partitions", "dead", "blocked", "audit", "events/" + id}
	for _, p := range pagesToCheck {
		checkPage(ctx, t, base+p, filepath.Join(artifacts, "page-"+cmpName(p)+".png"))
	}

	// Replay the dead event through its page: fill in the form, submit, follow the redirect.
	must(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"events/"+id),
		chromedp.WaitVisible(chromedp.ID("replay-submit")),
		chromedp.SendKeys(chromedp.ID("replay-actor"), "alice"),
		chromedp.SendKeys(chromedp.ID("replay-reason"), "consumer fixed (browser test)"),
		chromedp.SendKeys(chromedp.ID("replay-token"), token),
		chromedp.Click(chromedp.ID("replay-submit")),
		chromedp.WaitVisible(chromedp.ID("message")),
	))
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("message")))
	must(t, err)
	if !strings.Contains(msg, "replay: 1 event") {
		t.Fatalf("after submitting the replay form: message %q", msg)
	}
	// The relay publishes it, and the aggregate's held events after it, in order.
	wait, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := sink.WaitUntil(wait, func(msgs []outbox.Message) bool { return countAggregate(msgs, "s0") == 3 }); err != nil {
		t.Fatalf("the replayed aggregate was not published: %v", err)
	}
	must(t, chromedp.Do(ctx, chromedp.Navigate(base+"events/"+id), chromedp.WaitVisible(chromedp.ID("event-state"))))
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("event-state")))
	must(t, err)
	if state != "published" {
		t.Fatalf("the replayed event's page shows %q, want published", state)
	}
	checkPage(ctx, t, base+"events/"+id, filepath.Join(artifacts, "page-event-published.png"))
	must(t, chromedp.Do(ctx, chromedp.Navigate(base+"audit"), chromedp.WaitVisible(chromedp.ID("audit"))))
	audit, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#audit tbody")))
	must(t, err)
	if !strings.Contains(audit, "alice") || !strings.Contains(audit, "consumer fixed (browser test)") {
		t.Fatalf("the audit page does not show the replay: %q", audit)
	}

	// Pause an aggregate type through the pauses page: the overview says so; resume it
	// through the same page.
	must(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"pauses"),
		chromedp.WaitVisible(chromedp.ID("pause-submit")),
		chromedp.SetValue(chromedp.ID("pause-kind"), "aggregate_type"),
		chromedp.SendKeys(chromedp.ID("pause-aggregate-type"), "order"),
		chromedp.SendKeys(chromedp.ID("pause-actor"), "carol"),
		chromedp.SendKeys(chromedp.ID("pause-reason"), "broker migration (browser test)"),
		chromedp.SendKeys(chromedp.ID("pause-token"), token),
		chromedp.Click(chromedp.ID("pause-submit")),
		chromedp.WaitVisible(chromedp.ID("message")),
	))
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.pauses WHERE resumed_at IS NULL AND aggregate_type = 'order' AND paused_by = 'carol'`); n != 1 {
		t.Fatalf("%d active pauses of order by carol after the pause form", n)
	}
	checkPage(ctx, t, base+"pauses", filepath.Join(artifacts, "page-pauses.png"))
	must(t, chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("p.paused"))))
	banner, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("p.paused")))
	must(t, err)
	if !strings.Contains(banner, `Paused: aggregate type "order"`) {
		t.Fatalf("the overview's pause banner: %q", banner)
	}
	must(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"pauses"),
		chromedp.WaitVisible(chromedp.ID("resume-submit-0")),
		chromedp.SendKeys(chromedp.ID("resume-actor-0"), "carol"),
		chromedp.SendKeys(chromedp.ID("resume-reason-0"), "done"),
		chromedp.SendKeys(chromedp.ID("resume-token-0"), token),
		chromedp.Click(chromedp.ID("resume-submit-0")),
		chromedp.WaitVisible(chromedp.ID("message")),
	))
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.pauses WHERE resumed_at IS NULL`); n != 0 {
		t.Fatalf("%d active pauses after the resume form", n)
	}
	t.Logf("screenshots in %s", artifacts)
}

// checkPage loads url, saves a full-page screenshot to file and checks it is not blank,
// and runs the accessibility checks.
func checkPage(ctx context.Context, t *testing.T, url, file string) {
	t.Helper()
	must(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main"))))
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, err)
	if err := os.WriteFile(file, shot, 0o600); err != nil {
		t.Fatal(err)
	}
	if frac := inked(t, shot); frac < 0.01 {
		t.Errorf("%s: the screenshot is blank (%.4f of its pixels differ from the background)", url, frac)
	}
	problems, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](a11yScript))
	must(t, err)
	for _, p := range problems {
		t.Errorf("%s: accessibility: %s", url, p)
	}
}

// inked is the fraction of the image's pixels that differ from its top-left pixel.
func inked(t *testing.T, shot []byte) float64 {
	t.Helper()
	img, err := decode(shot)
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	b := img.Bounds()
	bg := img.At(b.Min.X, b.Min.Y)
	br, bgc, bb, _ := bg.RGBA()
	var n, total int
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			total++
			if r != br || g != bgc || bl != bb {
				n++
			}
		}
	}
	return float64(n) / float64(total)
}

// decode reads a screenshot: chromedp's FullScreenshot gives a PNG at quality 100, a
// JPEG below; only the PNG decoder is in the standard library's image set by default.
func decode(b []byte) (image.Image, error) {
	if bytes.HasPrefix(b, []byte("\x89PNG")) {
		return png.Decode(bytes.NewReader(b))
	}
	img, _, err := image.Decode(bytes.NewReader(b))
	return img, err
}

// a11yScript returns the page's accessibility problems: inputs without a label, a
// document without lang or h1, images without a text alternative, and text whose
// contrast with its background is under WCAG AA's 4.5:1.
const a11yScript = `(() => {
  const out = [];
  if (!document.documentElement.lang) out.push('html has no lang');
  if (!document.querySelector('h1')) out.push('no h1');
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (el.type === 'hidden') continue;
    const labelled = (el.id && document.querySelector('label[for="' + el.id + '"]')) || el.closest('label') || el.getAttribute('aria-label');
    if (!labelled) out.push('unlabelled ' + el.tagName.toLowerCase() + ' name=' + el.name);
  }
  for (const el of document.querySelectorAll('img, svg')) {
    if (!el.getAttribute('alt') && !el.getAttribute('aria-label')) out.push('image without a text alternative');
  }
  const rgb = s => (s.match(/[\d.]+/g) || []).map(Number);
  const lum = c => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const bgOf = el => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor); if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c; } return [255, 255, 255]; };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || seen.has(el) || !el.offsetParent) continue;
    seen.add(el);
    const fg = lum(rgb(getComputedStyle(el).color)), bg = lum(bgOf(el));
    const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    if (ratio < 4.5) out.push('contrast ' + ratio.toFixed(2) + ':1 for "' + n.textContent.trim().slice(0, 30) + '"');
  }
  return out;
})()`

func cmpName(p string) string {
	if p == "" {
		return "overview"
	}
	if strings.HasPrefix(p, "events/") {
		return "event"
	}
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func startRelay(t *testing.T, pool *pgxpool.Pool, sink outbox.Sink) {
	t.Helper()
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
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
}

func countAggregate(msgs []outbox.Message, agg string) int {
	seen := map[string]bool{}
	for _, m := range msgs {
		if m.AggregateID == agg {
			seen[m.ID.String()] = true
		}
	}
	return len(seen)
}

func enqueue(t testing.TB, pool *pgxpool.Pool, aggs []string, perAggregate int) {
	t.Helper()
	ctx := context.Background()
	var events []outbox.Event
	for v := 1; v <= perAggregate; v++ {
		for _, a := range aggs {
			events = append(events, outbox.Event{AggregateType: "order", AggregateID: a, AggregateVersion: int64(v), EventType: "order.changed", Payload: []byte(`{}`)})
		}
	}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
		t.Fatal(err)
	}
}

func aggregates(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func queryInt(t testing.TB, pool *pgxpool.Pool, sql string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// The blank check sees a blank screenshot (its negative control).
func TestInkedSeesABlankScreenshot(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 200, 100))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if frac := inked(t, b.Bytes()); frac != 0 {
		t.Fatalf("a white image is %.4f inked", frac)
	}
}
