package cli_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
)

const alertsPath = "../../../../docs/alerts.yaml"

// TestAlertRules: docs/alerts.yaml is valid Prometheus rules (promtool check rules,
// when promtool is installed — Debian's prometheus package), has the alerts the issue
// asks for, and names only metrics the daemon exports.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	var alerts []string
	metric := regexp.MustCompile(`\boutbox_[a-z_]+`)
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, m := range metric.FindAllString(r.Expr, -1) {
				if !slices.Contains(exportedMetrics, m) && !slices.Contains(cdcMetrics, m) {
					t.Errorf("alert %s uses %s, which the daemon does not export", r.Alert, m)
				}
			}
		}
	}
	for _, want := range []string{"OutboxBacklogOld", "OutboxDeadLetters", "OutboxBlockedAggregates", "OutboxSinkDown", "OutboxNoProgress", "OutboxOldTransaction", "OutboxRelayMissing"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s lacks the alert %s", alertsPath, want)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: rules parsed as YAML only")
		return
	}
	if out, err := exec.Command(promtool, "check", "rules", alertsPath).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

// exportedMetrics are the metric names of /metrics (TestMetricsMatchTheDatabase
// checks the main ones against a scrape).
var exportedMetrics = []string{
	"outbox_published_total", "outbox_retried_total", "outbox_dead_total", "outbox_batches_total", "outbox_claims_total",
	"outbox_breaker_opens_total", "outbox_sink_down_batches_total", "outbox_batch_errors_total", "outbox_retention_purged_total",
	"outbox_leases_acquired_total", "outbox_leases_rescued_total", "outbox_leases_lost_total", "outbox_leases_released_total",
	"outbox_fenced_writes_total", "outbox_late_publishes_total", "outbox_poison_rows_total", "outbox_abandoned_batches_total",
	"outbox_relay_workers", "outbox_relay_active_workers", "outbox_wakeup_listening", "outbox_breaker_open", "outbox_database_up", "outbox_pending_events",
	"outbox_oldest_pending_age_seconds", "outbox_dead_events", "outbox_blocked_aggregates", "outbox_events_table_bytes",
	"outbox_events_index_bytes", "outbox_oldest_transaction_age_seconds", "outbox_leases_held", "outbox_events_total",
	"outbox_batch_duration_seconds", "outbox_publish_latency_seconds",
}

// cdcMetrics are the metric names /metrics adds with relay.source cdc
// (TestRelaySourceCDC checks them against a scrape).
var cdcMetrics = []string{
	"outbox_cdc_streaming", "outbox_cdc_events_read_total", "outbox_cdc_events_published_total", "outbox_cdc_events_left_total",
	"outbox_cdc_events_emitted_total", "outbox_cdc_events_written_total", "outbox_cdc_messages_refused_total",
	"outbox_cdc_slot_retained_wal_bytes", "outbox_cdc_slot_unconfirmed_wal_bytes", "outbox_cdc_confirmed_age_seconds", "outbox_cdc_slot_wal_status",
}
