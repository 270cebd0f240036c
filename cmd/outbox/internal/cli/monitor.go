package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxkit/outbox/relay"
)

// monitor serves the daemon's metrics and health. The database gauges come from one
// round of cheap indexed queries (status_summary, gauges) at most every
// metrics.interval, cached: a scrape never counts a huge table.
type monitor struct {
	pool  *pgxpool.Pool
	relay *relay.Relay
	cfg   Config
	reg   *prometheus.Registry

	outcomes      *prometheus.CounterVec
	batchDuration prometheus.Histogram
	latency       prometheus.Histogram

	mu           sync.Mutex
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
	OwnedBacklog           bool // an available event in a partition this relay may claim
	LeasesHeld             int64
}

// newMonitor returns the monitor of a relay to be built with m.relay set later (the
// relay takes the monitor as its Observer).
func newMonitor(pool *pgxpool.Pool, cfg Config) *monitor {
	m := &monitor{pool: pool, cfg: cfg, reg: prometheus.NewRegistry(), lastProgress: time.Now()}
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
	m.reg.MustRegister(m, m.outcomes, m.batchDuration, m.latency)
	return m
}

// BatchSettled implements relay.Observer.
func (m *monitor) BatchSettled(b relay.BatchReport) {
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

// run refreshes the gauges and the progress clock until ctx ends.
func (m *monitor) run(ctx context.Context) {
	t := time.NewTicker(min(time.Second, m.cfg.StallAfter/4))
	defer t.Stop()
	for {
		m.refresh(ctx, false)
		m.tick(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick advances the progress clock: the relay progressed, or it has no backlog to make
// progress on.
func (m *monitor) tick(now time.Time) {
	n := progress(m.relay.Stats())
	m.mu.Lock()
	defer m.mu.Unlock()
	if n != m.lastCount || (m.dbErr == nil && !m.dbAt.IsZero() && !m.db.OwnedBacklog) {
		m.lastProgress = now
	}
	m.lastCount = n
}

// refresh reads the database gauges when they are older than metrics.interval (or force).
func (m *monitor) refresh(ctx context.Context, force bool) {
	m.mu.Lock()
	fresh := !m.dbAt.IsZero() && time.Since(m.dbAt) < m.cfg.MetricsInterval
	m.mu.Unlock()
	if fresh && !force {
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

func (m *monitor) read(ctx context.Context) (dbGauges, error) {
	a := &app{cfg: m.cfg}
	var g dbGauges
	q, err := a.query("status_summary")
	if err != nil {
		return g, err
	}
	var (
		oldest *time.Time
		now    time.Time
	)
	if err := m.pool.QueryRow(ctx, q).Scan(&g.Pending, &oldest, &g.Dead, &g.Blocked, &now); err != nil {
		return g, tableError("events", err)
	}
	g.OldestPendingSeconds = age(now, oldest)
	q, _ = a.query("gauges")
	if err := m.pool.QueryRow(ctx, q, m.relay.Owner(), string(cmpOr(string(m.cfg.Relay.Mode), string(relay.DefaultMode))),
		cmpInt(m.cfg.Relay.Partitions, relay.DefaultPartitions), cmp.Or(m.cfg.Relay.BatchTimeout, relay.DefaultBatchTimeout)+10*time.Second).
		Scan(&g.TableBytes, &g.IndexBytes, &g.OldestXminSeconds, &g.OwnedBacklog, &g.LeasesHeld); err != nil {
		return g, tableError("events", err)
	}
	return g, nil
}

func cmpInt(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// ready reports whether the database answers and the relay is not stalled: a backlog
// it may claim, and no progress for health.stall_after. Holding leases is not asked
// for: a new pod of a rolling deploy holds none yet.
func (m *monitor) ready(ctx context.Context) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := m.pool.Ping(ctx); err != nil {
		return false, "database unreachable"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if since := time.Since(m.lastProgress); since > m.cfg.StallAfter {
		return false, "stalled: a backlog and no progress for " + since.Round(time.Second).String()
	}
	return true, "ok"
}

func (m *monitor) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := m.ready(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": ok, "reason": why})
	})
	return mux
}
