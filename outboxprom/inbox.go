package outboxprom

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/inbox"
)

// InboxMetrics is a consumer's metrics: an [inbox.Observer] (pass it as
// inbox.Config.Observer) and a [prometheus.Collector]. One serves every consumer of a
// process; its series are labelled by consumer.
type InboxMetrics struct {
	events   *prometheus.CounterVec
	errs     *prometheus.CounterVec
	handler  *prometheus.HistogramVec
	lag      *prometheus.HistogramVec
	counters []inboxCounter
}

// inboxCounter is one of a Report's counts, exported as outbox_inbox_events_total{kind}.
type inboxCounter struct {
	kind string
	get  func(inbox.Report) int
}

// NewInboxMetrics returns the metrics of the consumers that report to it.
func NewInboxMetrics() *InboxMetrics {
	return &InboxMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_inbox_events_total",
			Help: "Events a consumer settled, by kind: applied (unparked ones included), duplicate, stale, parked, unparked, quarantined, replayed.",
		}, []string{"consumer", "kind"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_inbox_errors_total",
			Help: "Calls that recorded nothing, by reason: gap (GapRetry refused a message past a gap) or error.",
		}, []string{"consumer", "reason"}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_inbox_handler_duration_seconds",
			Help:    "Time a call spent in the handler, over every event it ran.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms … 16s
		}, []string{"consumer"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_inbox_lag_seconds",
			Help:    "Age of an applied message at its commit (its created_at to the consumer's commit).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16), // 1ms … 15min
		}, []string{"consumer"}),
		counters: []inboxCounter{
			{"applied", func(r inbox.Report) int { return r.Applied }},
			{"duplicate", func(r inbox.Report) int { return r.Duplicates }},
			{"stale", func(r inbox.Report) int { return r.Stale }},
			{"parked", func(r inbox.Report) int { return r.Parked }},
			{"unparked", func(r inbox.Report) int { return r.Unparked }},
			{"quarantined", func(r inbox.Report) int { return r.Quarantined }},
			{"replayed", func(r inbox.Report) int { return r.Replayed }},
		},
	}
}

// Processed implements [inbox.Observer].
func (m *InboxMetrics) Processed(r inbox.Report) {
	if r.Err != nil {
		reason := "error"
		if errors.Is(r.Err, inbox.ErrGap) {
			reason = "gap"
		}
		m.errs.WithLabelValues(r.Consumer, reason).Inc()
	}
	for _, c := range m.counters {
		if n := c.get(r); n > 0 {
			m.events.WithLabelValues(r.Consumer, c.kind).Add(float64(n))
		}
	}
	m.handler.WithLabelValues(r.Consumer).Observe(r.HandlerDuration.Seconds())
	if r.Lag > 0 {
		m.lag.WithLabelValues(r.Consumer).Observe(r.Lag.Seconds())
	}
}

// Describe implements [prometheus.Collector].
func (m *InboxMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.events.Describe(ch)
	m.errs.Describe(ch)
	m.handler.Describe(ch)
	m.lag.Describe(ch)
}

// Collect implements [prometheus.Collector].
func (m *InboxMetrics) Collect(ch chan<- prometheus.Metric) {
	m.events.Collect(ch)
	m.errs.Collect(ch)
	m.handler.Collect(ch)
	m.lag.Collect(ch)
}
