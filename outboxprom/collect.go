package outboxprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/relay"
)

// counterMetric is a relay counter exported as a Prometheus counter.
type counterMetric struct {
	desc *prometheus.Desc
	get  func(relay.Stats) int64
}

func counter(name, help string, get func(relay.Stats) int64) counterMetric {
	return counterMetric{prometheus.NewDesc("outbox_"+name, help, nil, nil), get}
}

// relayCounters are the relay's own counters (this process since it started).
var relayCounters = []counterMetric{
	counter("published_total", "Events published (acknowledged by the sink), repeats included.", func(s relay.Stats) int64 { return s.Published }),
	counter("retried_total", "Failed attempts with another to come.", func(s relay.Stats) int64 { return s.Retried }),
	counter("dead_total", "Events that went dead (permanent failures, spent budgets, poison rows).", func(s relay.Stats) int64 { return s.Dead }),
	counter("batches_total", "Batches that claimed at least one event.", func(s relay.Stats) int64 { return s.Batches }),
	counter("claims_total", "Claim transactions, empty ones included.", func(s relay.Stats) int64 { return s.Claims }),
	counter("breaker_opens_total", "Transitions of the sink breaker from closed to open.", func(s relay.Stats) int64 { return s.BreakerOpens }),
	counter("sink_down_batches_total", "Batches abandoned because the sink was down.", func(s relay.Stats) int64 { return s.SinkDownBatches }),
	counter("batch_errors_total", "Batches that failed on the database side.", func(s relay.Stats) int64 { return s.Errors }),
	counter("retention_purged_total", "Published events removed by retention.", func(s relay.Stats) int64 { return s.Purged }),
	counter("leases_acquired_total", "Partition leases taken.", func(s relay.Stats) int64 { return s.LeasesAcquired }),
	counter("leases_rescued_total", "Leases taken over after they expired (their events rescued).", func(s relay.Stats) int64 { return s.LeasesRescued }),
	counter("leases_lost_total", "Leases lost to another relay.", func(s relay.Stats) int64 { return s.LeasesLost }),
	counter("leases_released_total", "Leases given back.", func(s relay.Stats) int64 { return s.LeasesReleased }),
	counter("fenced_writes_total", "Events of batches rolled back because their lease had been taken over.", func(s relay.Stats) int64 { return s.FencedWrites }),
	counter("late_publishes_total", "Events whose Publish call outlived its batch.", func(s relay.Stats) int64 { return s.LatePublishes }),
	counter("poison_rows_total", "Rows parked dead because every claim including them failed.", func(s relay.Stats) int64 { return s.PoisonRows }),
	counter("abandoned_batches_total", "Batches dropped unpublished because the lease might have expired.", func(s relay.Stats) int64 { return s.AbandonedBatches }),
}

var (
	descWorkers   = prometheus.NewDesc("outbox_relay_workers", "Batches the relay may run at once now (an ordered relay with the default concurrency runs one until busy).", nil, nil)
	descActive    = prometheus.NewDesc("outbox_relay_active_workers", "Workers claiming now (an ordered relay with the default concurrency: one until busy).", nil, nil)
	descListening = prometheus.NewDesc("outbox_wakeup_listening", "1 when the wake-up listener passed its self-test.", nil, nil)
	descBreaker   = prometheus.NewDesc("outbox_breaker_open", "1 while the breaker keeps the relay off its sink (the sink was found down).", nil, nil)
	descUp        = prometheus.NewDesc("outbox_database_up", "1 when the last read of the database gauges succeeded.", nil, nil)
	descPending   = prometheus.NewDesc("outbox_pending_events", "Events not yet published, dead or discarded (the schema's, all relays).", nil, nil)
	descOldest    = prometheus.NewDesc("outbox_oldest_pending_age_seconds", "Age of the oldest pending event (0 without a backlog).", nil, nil)
	descDead      = prometheus.NewDesc("outbox_dead_events", "Dead letters: dead and not discarded.", nil, nil)
	descBlocked   = prometheus.NewDesc("outbox_blocked_aggregates", "Aggregates with a dead event holding them.", nil, nil)
	descTable     = prometheus.NewDesc("outbox_events_table_bytes", "Size of the events table (heap and TOAST).", nil, nil)
	descIndex     = prometheus.NewDesc("outbox_events_index_bytes", "Size of the events table's indexes.", nil, nil)
	descXmin      = prometheus.NewDesc("outbox_oldest_transaction_age_seconds", "Age of the oldest transaction holding a snapshot in the database (backend_xmin): it stops vacuum.", nil, nil)
	descLeases    = prometheus.NewDesc("outbox_leases_held", "Partition leases this relay holds.", nil, nil)
)

// Describe implements [prometheus.Collector].
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range relayCounters {
		ch <- c.desc
	}
	for _, d := range []*prometheus.Desc{descWorkers, descActive, descListening, descBreaker, descUp, descPending, descOldest, descDead, descBlocked, descTable, descIndex, descXmin, descLeases} {
		ch <- d
	}
	m.outcomes.Describe(ch)
	m.batchDuration.Describe(ch)
	m.latency.Describe(ch)
}

// Collect implements [prometheus.Collector]: the relay's counters, the outcomes and
// histograms the Observer fed, and the database gauges cached for Interval.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.outcomes.Collect(ch)
	m.batchDuration.Collect(ch)
	m.latency.Collect(ch)
	r := m.watched()
	if r == nil { // not watching a relay yet: nothing else to say
		return
	}
	s := r.Stats()
	for _, c := range relayCounters {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.get(s)))
	}
	ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(s.Workers))
	ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(s.ActiveWorkers))
	ch <- prometheus.MustNewConstMetric(descListening, prometheus.GaugeValue, b2f(s.WakeupListening))
	ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, b2f(!s.BreakerOpenUntil.IsZero()))
	m.refresh(context.Background())
	m.mu.Lock()
	g, ok := m.db, m.dbErr == nil && !m.dbAt.IsZero()
	m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, b2f(ok))
	if !ok {
		return
	}
	for _, v := range []struct {
		d *prometheus.Desc
		v float64
	}{
		{descPending, float64(g.Pending)},
		{descOldest, g.OldestPendingSeconds},
		{descDead, float64(g.Dead)},
		{descBlocked, float64(g.Blocked)},
		{descTable, float64(g.TableBytes)},
		{descIndex, float64(g.IndexBytes)},
		{descXmin, g.OldestXminSeconds},
		{descLeases, float64(g.LeasesHeld)},
	} {
		ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.v)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
