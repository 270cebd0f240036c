package outboxprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
)

var (
	descNotifyRequests = prometheus.NewDesc("outbox_notifier_requests_total", "Wake-ups asked for after commits (Notifier.AfterCommit calls).", nil, nil)
	descNotifySent     = prometheus.NewDesc("outbox_notifier_sends_total", "Wake-up notifications sent (requests coalesce into far fewer).", nil, nil)
	descNotifyFailed   = prometheus.NewDesc("outbox_notifier_send_errors_total", "Wake-up notifications that failed: the relays find the events at their next poll.", nil, nil)
)

// NotifierCollector exports a producer's [outbox.Notifier] counters: the wake-ups its
// commits asked for, the notifications sent and those that failed. Register it in the
// process that writes events (the relay's Metrics live where the relay runs).
type NotifierCollector struct{ n *outbox.Notifier }

// NewNotifierCollector returns the collector of n.
func NewNotifierCollector(n *outbox.Notifier) *NotifierCollector { return &NotifierCollector{n: n} }

// Describe implements [prometheus.Collector].
func (c *NotifierCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descNotifyRequests
	ch <- descNotifySent
	ch <- descNotifyFailed
}

// Collect implements [prometheus.Collector].
func (c *NotifierCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.n.Stats()
	ch <- prometheus.MustNewConstMetric(descNotifyRequests, prometheus.CounterValue, float64(s.Requests))
	ch <- prometheus.MustNewConstMetric(descNotifySent, prometheus.CounterValue, float64(s.Sent))
	ch <- prometheus.MustNewConstMetric(descNotifyFailed, prometheus.CounterValue, float64(s.Failed))
}
