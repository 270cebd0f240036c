// Package outboxprom exports a relay's metrics to Prometheus: the relay's own counters
// ([relay.Stats]), each settled event's outcome by event type, batch durations and
// commit → acknowledgement latency (through [relay.Config.Observer]), and cheap database
// gauges — the backlog and the age of its oldest event, dead letters, blocked
// aggregates, the events table's size, the age of the oldest transaction holding back
// vacuum, leases held — read with one round of indexed queries at most every
// [Options.Interval] and cached, so a scrape never counts a huge table.
//
// It lives in its own module so that the core needs no metrics SDK. The `outbox relay`
// daemon serves these metrics on /metrics; a service that runs the relay in-process
// registers a [Metrics] with its own registry:
//
//	m := outboxprom.New(pool, nil)
//	cfg := &relay.Config{Observer: m}
//	r, err := relay.New(pool, sink, cfg)
//	…
//	m.Watch(r)
//	prometheus.MustRegister(m)
//	go m.Run(ctx) // the progress clock behind Stalled
//
// A consumer passes [NewInboxMetrics] as inbox.Config.Observer and registers it: events
// settled by consumer and kind (applied, duplicate, stale, parked, unparked,
// quarantined, replayed), errors (gap refusals apart), handler time and lag.
//
// A producer registers [NewNotifierCollector] for its [outbox.Notifier]: the wake-ups
// its commits asked for, the notifications sent (coalesced) and those that failed.
//
// The metric names, and the alert rules written against them, are listed in the
// repository's docs/alerts.yaml and docs/operations.md.
package outboxprom
