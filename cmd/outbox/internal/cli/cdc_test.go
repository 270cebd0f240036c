package cli_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/sink/sinktest"
)

// `outbox relay` with relay.source cdc publishes what commits through the WAL: with the
// relay polling once a minute and no notification sent, 100 events inserted by raw SQL
// reach the sink within seconds, and /metrics says change data capture published them;
// SIGTERM stops it cleanly.
func TestRelaySourceCDC(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	var db string
	if err := pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	slot := "cli_" + strings.ReplaceAll(db, "outbox_test_", "")
	t.Cleanup(func() {
		_, _ = pool.Exec(t.Context(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
	})
	d := startDaemon(t, []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=jsonl", "OUTBOX_SINK_JSONL_PATH=" + out, "OUTBOX_HTTP_LISTEN=127.0.0.1:0",
		"OUTBOX_RELAY_SOURCE=cdc", "OUTBOX_CDC_SLOT=" + slot, "OUTBOX_RELAY_WAKEUP=poll", "OUTBOX_RELAY_POLL_INTERVAL=1m",
	})
	sinktest.WaitFor(t, 30*time.Second, "change data capture to start", func() bool {
		return strings.Contains(d.stderr.String(), "change data capture started")
	})
	time.Sleep(300 * time.Millisecond) // the new slot's wake-up of the polling claims has found nothing
	insert(t, pool, "order.created", "order", 100, 4, 0)
	sinktest.WaitFor(t, 20*time.Second, "the 100 events in the sink", func() bool { return len(readIDs(t, out)) == 100 })
	m := listening.FindStringSubmatch(d.stderr.String())
	if m == nil {
		t.Fatalf("no listener address in the log:\n%s", d.stderr.String())
	}
	var scraped string
	sinktest.WaitFor(t, 10*time.Second, "/metrics to show the 100 events published by change data capture", func() bool {
		resp, err := http.Get("http://" + m[1] + "/metrics")
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		scraped = string(body)
		return strings.Contains(scraped, "outbox_cdc_streaming 1") && strings.Contains(scraped, "outbox_cdc_events_published_total 100")
	})
	for _, name := range cdcMetrics {
		if !strings.Contains(scraped, "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	d.stop(t, 15*time.Second)
}
