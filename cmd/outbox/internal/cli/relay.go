package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxadmin"

	"github.com/outboxkit/outbox/cdc"
	"github.com/outboxkit/outbox/outboxprom"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/httpsink"
	"github.com/outboxkit/outbox/sink/jsonlsink"
)

// relayCommand is `outbox relay`: the daemon.
func (a *app) relayCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run the relay: publish events to the configured sink, apply retention, serve /metrics, /healthz and /readyz",
		Long: `Run the relay until SIGTERM or SIGINT: then it stops claiming, lets in-flight batches
settle for at most relay.shutdown_timeout, releases its leases and exits 0. SIGHUP is
ignored (the configuration is read at start only: restart to change it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runRelay(cmd.Context()) },
	}
	addFlags(cmd.Flags(), scopeRelay)
	return cmd
}

// newSink builds the configured sink; close releases it.
func (a *app) newSink(ctx context.Context) (sink outbox.Sink, closeFn func() error, err error) {
	switch a.cfg.Sink.Type {
	case "jsonl":
		if a.cfg.Sink.JSONLPath == "-" {
			return jsonlsink.New(a.io.Out), func() error { return nil }, nil
		}
		s, err := jsonlsink.Open(a.cfg.Sink.JSONLPath)
		if err != nil {
			return nil, nil, usagef("sink.jsonl.path: %w", err)
		}
		return s, s.Close, nil
	case "http":
		h := a.cfg.Sink.HTTP
		s, err := httpsink.New(&httpsink.Config{
			URL: h.URL, AllowedHosts: h.AllowedHosts, Secrets: h.Secrets, AllowHTTP: h.AllowHTTP,
			AllowPrivate: h.AllowPrivate, RequestTimeout: h.RequestTimeout, Logger: a.log,
		})
		if err != nil {
			return nil, nil, usagef("sink.http: %w", err)
		}
		return s, s.Close, nil
	case "nats":
		return a.natsSink(ctx)
	case "kafka":
		return a.kafkaSink()
	case "redis":
		return a.redisSink()
	case "amqp":
		return a.amqpSink()
	case "sqs":
		return a.sqsSink(ctx)
	}
	return nil, nil, usagef("sink.type: unknown sink %q", a.cfg.Sink.Type)
}

func (a *app) runRelay(ctx context.Context) error {
	sink, closeSink, err := a.newSink(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := closeSink(); err != nil {
			a.log.Warn("close sink", slog.Any("error", err))
		}
	}()
	tp, err := a.tracerProvider(ctx)
	if err != nil {
		return err
	}
	defer a.shutdownTracing(ctx, tp) // before the sink closes: its spans are flushed first
	sink = a.traceSink(sink, tp)
	pool, err := a.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg := a.cfg.Relay
	cfg.Schema = a.cfg.Schema
	cfg.Logger = a.log // the relay adds relay_id and schema to its lines
	mon := newMonitor(pool, a.cfg)
	cfg.Observer = mon.metrics
	r, err := relay.New(pool, sink, &cfg) // checks the configuration before connecting
	if err != nil {
		return usageError{keyedRelayError(err)}
	}
	mon.metrics.Watch(r)
	if err := ping(ctx, pool); err != nil {
		return err
	}
	log := a.log.With(slog.String("relay_id", r.Owner()))

	if a.cfg.Admin.Enabled {
		if a.cfg.HTTPListen == "" {
			return usagef("admin.enabled: the admin is served on http.listen, which is off")
		}
		operators := map[string]string{}
		for _, e := range a.cfg.Admin.Operators {
			name, tok, ok := strings.Cut(e, ":")
			if !ok || name == "" || tok == "" {
				return usagef("admin.operators: an entry must be name:token")
			}
			if _, dup := operators[name]; dup {
				return usagef("admin.operators: operator %q is named twice", name)
			}
			operators[name] = tok
		}
		var redactPaths []string // redact.paths: the admin's event detail redacts what dead show does
		for _, p := range a.cfg.RedactPaths {
			redactPaths = append(redactPaths, p.String())
		}
		admin, err := outboxadmin.New(outboxadmin.Options{
			Pool: pool, Schema: a.cfg.Schema, Token: a.cfg.Admin.Token, ReadOnly: a.cfg.Admin.ReadOnly,
			Operators: operators, ShowPayloads: a.cfg.Admin.ShowPayloads, RedactPaths: redactPaths,
			PathPrefix: adminPrefix, Logger: a.log,
		})
		switch {
		case err != nil && (strings.Contains(err.Error(), "Operators[") || strings.Contains(err.Error(), "Operators:")):
			return usagef("admin.operators: %w", err)
		case err != nil && strings.Contains(err.Error(), "RedactPaths"):
			return usagef("redact.paths: %w", err)
		case err != nil:
			return usagef("admin.token: %w", err)
		}
		mon.admin = admin
	}
	var srv *http.Server
	serveErr := make(chan error, 1)
	if a.cfg.HTTPListen != "" {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", a.cfg.HTTPListen)
		if err != nil {
			return usagef("http.listen: %w", err)
		}
		srv = &http.Server{Handler: mon.handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { serveErr <- srv.Serve(ln) }()
		served := "/metrics, /healthz, /readyz"
		if mon.admin != nil {
			served += ", the admin under " + adminPrefix
		}
		log.Info("serving "+served, slog.String("address", ln.Addr().String()))
	}
	monCtx, monStop := context.WithCancel(context.WithoutCancel(ctx))
	monDone := make(chan struct{})
	go func() { defer close(monDone); mon.metrics.Run(monCtx) }()

	log.Info("relay starting", slog.String("schema", cfg.Schema), slog.String("mode", string(cmpOr(string(cfg.Mode), string(relay.DefaultMode)))), slog.String("sink", a.cfg.Sink.Type))
	start := time.Now()
	cdcDone := a.runCDC(ctx, pool, r, mon, log)
	runErr := r.Run(ctx)
	<-cdcDone
	monStop()
	<-monDone
	if srv != nil {
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = srv.Shutdown(shutCtx)
		cancel()
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener", slog.Any("error", err))
		}
	}
	st := r.Stats()
	if runErr != nil {
		return fmt.Errorf("relay: %w", runErr)
	}
	log.Info("relay stopped", slog.Int64("published", st.Published), slog.Int64("dead", st.Dead), slog.Duration("ran", time.Since(start).Round(time.Millisecond)))
	return nil
}

// runCDC starts, with relay.source cdc, the change-data-capture source beside the relay
// r (its metrics on mon's /metrics), and returns a channel closed when it has ended (at
// once without it). When it cannot go on (wal_level, a lost slot) it says so, and the
// relay's polling goes on publishing everything from the table.
func (a *app) runCDC(ctx context.Context, pool *pgxpool.Pool, r *relay.Relay, mon *monitor, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	if a.cfg.Source != "cdc" {
		close(done)
		return done
	}
	src, err := cdc.New(pool, r, &cdc.Config{Slot: a.cfg.CDCSlot, Logger: log})
	if err != nil {
		log.Error("relay.source cdc: " + err.Error() + "; the relay polls")
		close(done)
		return done
	}
	mon.reg.MustRegister(outboxprom.NewCDCCollector(src))
	go func() {
		defer close(done)
		if err := src.Run(ctx); err != nil {
			log.Error("relay.source cdc stopped; the relay polls on", slog.Any("error", err))
		}
	}()
	return done
}
