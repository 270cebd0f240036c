package outboxprom

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/internal/sqlq"
	"github.com/outboxkit/outbox/relay"
)

// Options configure [Metrics]. Zero fields mean the defaults given at each field.
type Options struct {
	// Interval is how often the database gauges are read, at most: a scrape within
	// Interval of the last read gets the cached values. Default [DefaultInterval].
	Interval time.Duration
}

// DefaultInterval is the default [Options.Interval].
const DefaultInterval = 10 * time.Second

// Metrics is one relay's metrics: a [relay.Observer] (pass it as relay.Config.Observer)
// and a [prometheus.Collector]. Call [Metrics.Watch] with the relay before it is
// collected or run.
type Metrics struct {
	pool     *pgxpool.Pool
	interval time.Duration

	outcomes      *prometheus.CounterVec
	batchDuration prometheus.Histogram
	latency       prometheus.Histogram

	mu           sync.Mutex
	relay        *relay.Relay
	gauges       sqlq.Statement[gaugeParams] // metrics_gauges.sql
	summarySQL   string                      // status_summary.sql
	db           dbGauges
	dbAt         time.Time // when db was read; zero: never
	dbErr        error
	lastProgress time.Time // last time the relay's counters moved, or it had nothing to do
	lastCount    int64
}

// dbGauges are the values read from the database.
type dbGauges struct {
	Pending, Dead, Blocked int64
	OldestPendingSeconds   float64
	TableBytes, IndexBytes int64
	OldestXminSeconds      float64
	OwnedBacklog           bool // a due event, not paused, in a partition this relay may claim
	LeasesHeld             int64
}

// New returns the metrics of a relay on pool, to be built with the result as its
// Observer and then passed to [Metrics.Watch].
func New(pool *pgxpool.Pool, opts *Options) *Metrics {
	if opts == nil {
		opts = &Options{}
	}
	m := &Metrics{pool: pool, interval: opts.Interval, lastProgress: time.Now()}
	if m.interval <= 0 {
		m.interval = DefaultInterval
	}
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_events_total",
		Help: "Events settled by this relay, by event type and outcome (published, retried, dead, not_attempted).",
	}, []string{"event_type", "outcome"})
	m.batchDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outbox_batch_duration_seconds",
		Help:    "Time of a batch from the start of its claim to its commit.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1ms … 33s
	})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outbox_publish_latency_seconds",
		Help:    "Time from an event's commit (created_at) to the sink's acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16), // 1ms … 15min
	})
	return m
}

// Watch names the relay whose counters and gauges m exports. Call it once, after
// relay.New and before m is collected or run.
func (m *Metrics) Watch(r *relay.Relay) {
	cfg := r.Config()
	quoted, err := sqlq.QuoteSchema(cfg.Schema)
	if err != nil {
		panic(fmt.Sprintf("outboxprom: the relay's schema: %v", err)) // relay.New validated it
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.relay, m.gauges, m.summarySQL = r, sqlq.Bind[gaugeParams]("metrics_gauges", quoted), sqlq.Query("status_summary", quoted)
}

// BatchSettled implements [relay.Observer].
func (m *Metrics) BatchSettled(b relay.BatchReport) {
	if !b.Late {
		m.batchDuration.Observe(b.Duration.Seconds())
	}
	now := time.Now()
	for _, e := range b.Events {
		m.outcomes.WithLabelValues(e.EventType, string(e.Outcome)).Inc()
		if e.Outcome == relay.OutcomePublished {
			m.latency.Observe(max(0, now.Sub(e.CreatedAt).Seconds()))
		}
	}
}

// progress is what counts as the relay moving: events leaving the backlog, published
// or dead. Retries are not: a sink that times out every call makes none.
func progress(s relay.Stats) int64 { return s.Published + s.Dead }

// Run refreshes the database gauges (every Interval) and the progress clock behind
// [Metrics.Stalled] (every second, or Interval when shorter) until ctx ends. Call it
// after Watch: before, it has no relay to follow.
func (m *Metrics) Run(ctx context.Context) {
	t := time.NewTicker(min(time.Second, m.interval))
	defer t.Stop()
	for {
		m.refresh(ctx)
		m.tick(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stalled returns how long ago the relay last made progress (published or dead
// events) or had nothing to do (no due, unpaused event in its partitions): a stall
// when that grows. It follows [Metrics.Run]'s clock.
func (m *Metrics) Stalled() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Since(m.lastProgress)
}

// tick advances the progress clock: the relay progressed, or it has no backlog to make
// progress on.
func (m *Metrics) tick(now time.Time) {
	r := m.watched()
	if r == nil {
		return
	}
	n := progress(r.Stats())
	m.mu.Lock()
	defer m.mu.Unlock()
	if n != m.lastCount || (m.dbErr == nil && !m.dbAt.IsZero() && !m.db.OwnedBacklog) {
		m.lastProgress = now
	}
	m.lastCount = n
}

// watched returns the relay Watch named; nil before.
func (m *Metrics) watched() *relay.Relay {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.relay
}

// refresh reads the database gauges when they are older than Interval (not before Watch).
func (m *Metrics) refresh(ctx context.Context) {
	if m.watched() == nil {
		return
	}
	m.mu.Lock()
	fresh := !m.dbAt.IsZero() && time.Since(m.dbAt) < m.interval
	m.mu.Unlock()
	if fresh {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := m.read(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dbErr = err
	if err == nil {
		m.db, m.dbAt = g, time.Now()
	}
}

// read runs the gauges' queries: metrics_gauges.sql, then status_summary.sql, in one
// round trip.
func (m *Metrics) read(ctx context.Context) (dbGauges, error) {
	var g dbGauges
	m.mu.Lock()
	r, gauges, summarySQL := m.relay, m.gauges, m.summarySQL
	m.mu.Unlock()
	cfg := r.Config()
	b := &pgx.Batch{}
	b.Queue(gauges.SQL, gauges.Args(&gaugeParams{Owner: r.Owner(), Mode: string(cfg.Mode), Partitions: cfg.Partitions, InFlight: cfg.BatchTimeout + 10*time.Second})...)
	b.Queue(summarySQL)
	br := m.pool.SendBatch(ctx, b)
	defer func() { _ = br.Close() }()
	if err := br.QueryRow().Scan(&g.TableBytes, &g.IndexBytes, &g.OldestXminSeconds, &g.OwnedBacklog, &g.LeasesHeld); err != nil {
		return g, fmt.Errorf("outboxprom: read gauges: %w", err)
	}
	var (
		oldest *time.Time
		now    time.Time
	)
	if err := br.QueryRow().Scan(&g.Pending, &oldest, &g.Dead, &g.Blocked, &now); err != nil {
		return g, fmt.Errorf("outboxprom: read the backlog: %w", err)
	}
	if oldest != nil {
		g.OldestPendingSeconds = max(0, now.Sub(*oldest).Seconds())
	}
	return g, nil
}

// gaugeParams holds metrics_gauges.sql's parameters, bound by name.
type gaugeParams struct {
	Owner      string        `sql:"owner"`
	Mode       string        `sql:"mode"`
	Partitions int           `sql:"partitions"`
	InFlight   time.Duration `sql:"in_flight"`
}
