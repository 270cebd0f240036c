package outboxprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/cdc"
)

var (
	descCDCStreaming   = prometheus.NewDesc("outbox_cdc_streaming", "1 while the change-data-capture source reads its replication slot.", nil, nil)
	descCDCRead        = prometheus.NewDesc("outbox_cdc_events_read_total", "Events read from the WAL (committed transactions only).", nil, nil)
	descCDCPublished   = prometheus.NewDesc("outbox_cdc_events_published_total", "Events the change-data-capture source had published (by seq, or emitted ones from the WAL).", nil, nil)
	descCDCEmitted     = prometheus.NewDesc("outbox_cdc_events_emitted_total", "Events read that were emitted table-less (outbox.Emit).", nil, nil)
	descCDCWritten     = prometheus.NewDesc("outbox_cdc_events_written_total", "Emitted events written to the events table instead of published (failed, held behind their aggregate, paused, scheduled, or the sink down).", nil, nil)
	descCDCRefused     = prometheus.NewDesc("outbox_cdc_messages_refused_total", "Logical decoding messages of the schema's prefix that were not the Writer's: skipped.", nil, nil)
	descCDCLeft        = prometheus.NewDesc("outbox_cdc_events_left_total", "Events read that the by-seq claim left to the relay's polling.", nil, nil)
	descCDCRetained    = prometheus.NewDesc("outbox_cdc_slot_retained_wal_bytes", "WAL the replication slot keeps: the server's position minus its restart_lsn.", nil, nil)
	descCDCUnconfirmed = prometheus.NewDesc("outbox_cdc_slot_unconfirmed_wal_bytes", "The server's position minus the slot's confirmed_flush_lsn: the slot's lag.", nil, nil)
	descCDCConfirmAge  = prometheus.NewDesc("outbox_cdc_confirmed_age_seconds", "Seconds since the source last moved its confirmed position (it moves while idle too).", nil, nil)
	descCDCWALStatus   = prometheus.NewDesc("outbox_cdc_slot_wal_status", "1 for the slot's wal_status at the last look: reserved, extended, unreserved or lost.", []string{"status"}, nil)
)

// CDCCollector exports a change-data-capture [cdc.Source]'s state: whether it streams,
// the events it read, published and left to polling, the emitted (table-less) ones and
// those of them written to the table, refused messages, and its slot's retained and
// unconfirmed WAL, confirmation age and wal_status (read every StatusInterval, never per
// scrape).
type CDCCollector struct{ src *cdc.Source }

// NewCDCCollector returns the collector of src.
func NewCDCCollector(src *cdc.Source) *CDCCollector { return &CDCCollector{src: src} }

// Describe implements [prometheus.Collector].
func (c *CDCCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCDCStreaming, descCDCRead, descCDCPublished, descCDCLeft, descCDCEmitted, descCDCWritten, descCDCRefused, descCDCRetained, descCDCUnconfirmed, descCDCConfirmAge, descCDCWALStatus} {
		ch <- d
	}
}

// Collect implements [prometheus.Collector].
func (c *CDCCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	streaming := 0.0
	if s.Streaming {
		streaming = 1
	}
	ch <- prometheus.MustNewConstMetric(descCDCStreaming, prometheus.GaugeValue, streaming)
	ch <- prometheus.MustNewConstMetric(descCDCRead, prometheus.CounterValue, float64(s.Events))
	ch <- prometheus.MustNewConstMetric(descCDCPublished, prometheus.CounterValue, float64(s.Published))
	ch <- prometheus.MustNewConstMetric(descCDCLeft, prometheus.CounterValue, float64(s.Left))
	ch <- prometheus.MustNewConstMetric(descCDCEmitted, prometheus.CounterValue, float64(s.Emitted))
	ch <- prometheus.MustNewConstMetric(descCDCWritten, prometheus.CounterValue, float64(s.Written))
	ch <- prometheus.MustNewConstMetric(descCDCRefused, prometheus.CounterValue, float64(s.Refused))
	ch <- prometheus.MustNewConstMetric(descCDCRetained, prometheus.GaugeValue, float64(s.RetainedBytes))
	ch <- prometheus.MustNewConstMetric(descCDCUnconfirmed, prometheus.GaugeValue, float64(s.ConfirmedLag))
	if !s.ConfirmedAt.IsZero() {
		ch <- prometheus.MustNewConstMetric(descCDCConfirmAge, prometheus.GaugeValue, time.Since(s.ConfirmedAt).Seconds())
	}
	if s.WALStatus != "" {
		ch <- prometheus.MustNewConstMetric(descCDCWALStatus, prometheus.GaugeValue, 1, s.WALStatus)
	}
}
