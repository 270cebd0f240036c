package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxkit/outbox/outboxprom"
)

// adminPrefix is where the daemon serves outboxadmin (admin.enabled).
const adminPrefix = "/outbox/"

// monitor serves the daemon's metrics (outboxprom: the relay's counters and cached
// database gauges, read at most every metrics.interval), its health, and with
// admin.enabled the admin API and dashboard.
type monitor struct {
	pool    *pgxpool.Pool
	cfg     Config
	metrics *outboxprom.Metrics
	reg     *prometheus.Registry
	admin   http.Handler // outboxadmin under /outbox/; nil unless admin.enabled
}

// newMonitor returns the monitor of a relay to be built with m.metrics as its Observer
// and then watched (m.metrics.Watch).
func newMonitor(pool *pgxpool.Pool, cfg Config) *monitor {
	m := &monitor{pool: pool, cfg: cfg, reg: prometheus.NewRegistry()}
	m.metrics = outboxprom.New(pool, &outboxprom.Options{Interval: cfg.MetricsInterval})
	m.reg.MustRegister(m.metrics)
	return m
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
	if since := m.metrics.Stalled(); since > m.cfg.StallAfter {
		return false, "stalled: a backlog and no progress for " + since.Round(time.Second).String()
	}
	return true, "ok"
}

func (m *monitor) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	if m.admin != nil {
		mux.Handle(adminPrefix, m.admin)
	}
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
