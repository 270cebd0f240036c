package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/examples/orders/inventory"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/internal/sqlq"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/natssink"
)

// The faults `outbox demo --faults` injects.
const (
	faultRelayKill    = "relay-kill"
	faultBrokerOutage = "broker-outage"
	faultNone         = "none"
)

// demoSeed is the stock the run's SKU starts with; each order takes one unit.
const demoSeed = 1_000_000_000

// demoFlags are the flags of `outbox demo`.
type demoFlags struct {
	duration time.Duration
	rate     int
	faults   string
	outage   time.Duration
	drain    time.Duration
	json     bool
}

// DemoSummary is the reconciliation `outbox demo` ends with, every figure but the
// fault counts and p99 computed from the database (--json prints it as JSON).
type DemoSummary struct {
	// Committed counts the run's orders (each committed with its event).
	Committed int64 `json:"committed"`
	// Published counts their events a relay marked published.
	Published int64 `json:"published"`
	// Consumed counts their events the inventory's inbox applied.
	Consumed int64 `json:"consumed"`
	// EffectsApplied counts the units taken off the stock (one per order).
	EffectsApplied int64 `json:"effects_applied"`
	// DuplicatesSkipped counts deliveries the inbox found already processed.
	DuplicatesSkipped int64 `json:"duplicates_skipped"`
	// Lost counts orders whose event was never applied.
	Lost int64 `json:"lost"`
	// DoubleEffects is EffectsApplied − Consumed: effects beyond one per event.
	DoubleEffects int64 `json:"double_effects"`
	// SinkDeliveries counts the deliveries JetStream acked, first ones and repeats;
	// Republished is SinkDeliveries − Published: the repeats, of the events the
	// killed relay had delivered but not marked (the stream's duplicate window drops
	// them, the inbox would skip any that got past it).
	SinkDeliveries int64 `json:"sink_deliveries"`
	Republished    int64 `json:"republished"`
	// BreakerOpens counts the relays' breaker trips (the broker outage).
	BreakerOpens int64 `json:"breaker_opens"`
	// RelayKills and BrokerOutages count the faults injected.
	RelayKills    int `json:"relay_kills"`
	BrokerOutages int `json:"broker_outages"`
	// P99CommitToConsumeMS is the 99th percentile, over the run, of the time from just
	// before the producer sent an order's COMMIT to its effect's handler, in
	// milliseconds (one process, one clock).
	P99CommitToConsumeMS float64 `json:"p99_commit_to_consume_ms"`
	// Interrupted: the run was stopped (Ctrl-C) before it drained.
	Interrupted bool `json:"interrupted"`
}

// demoCommand is `outbox demo`.
func (a *app) demoCommand() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the orders example end to end on a throwaway PostgreSQL and embedded NATS, inject faults, and reconcile",
		Long: "outbox demo runs the orders example: an HTTP producer (POST /orders) fed by a load generator, the relay to an\n" +
			"embedded NATS JetStream server, and the inventory consumer behind the inbox. Mid-run it kills the relay once\n" +
			"(its database connections cut, no graceful stop; a new relay takes over) and takes the broker away once; it\n" +
			"then drains and prints a reconciliation computed from the database: lost and double effects must be 0.\n" +
			"The database is --database-url or DATABASE_URL when given, else a throwaway cluster from the PostgreSQL server\n" +
			"binaries. Ctrl-C stops it and removes what it started.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runDemo(cmd.Context(), f) },
	}
	fs := cmd.Flags()
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "how long the load generator runs")
	fs.IntVar(&f.rate, "rate", 100, "orders per second the load generator posts (1 to 5000)")
	fs.StringVar(&f.faults, "faults", faultRelayKill+","+faultBrokerOutage, "faults to inject, comma-separated: relay-kill, broker-outage, or none")
	fs.DurationVar(&f.outage, "outage", 0, "how long the broker stays away (default a sixth of --duration, at least 1s)")
	fs.DurationVar(&f.drain, "drain-timeout", time.Minute, "how long to wait at the end for every event to be consumed")
	fs.BoolVar(&f.json, "json", false, "print the reconciliation as JSON on stdout (progress goes to stderr)")
	return cmd
}

// parseFaults returns which faults to inject.
func parseFaults(s string) (kill, outage bool, err error) {
	for _, p := range strings.Split(s, ",") {
		switch strings.TrimSpace(p) {
		case faultRelayKill:
			kill = true
		case faultBrokerOutage:
			outage = true
		case faultNone, "":
		default:
			return false, false, usagef("--faults: unknown fault %q (want relay-kill, broker-outage or none)", p)
		}
	}
	return kill, outage, nil
}

// demo is one run's moving parts.
type demo struct {
	a        *app
	flags    demoFlags
	pool     *pgxpool.Pool
	producer *pgxpool.Pool // the orders service's; commits is its tracer
	commits  *commitClock  // when each order's COMMIT was sent
	monitor  *pgxpool.Pool // the progress line's
	nats     *demoNATS
	sku      string
	progress io.Writer
	log      *slog.Logger // the components' logger

	reconcileStmt sqlq.Statement[reconcileParams]
	killStmt      sqlq.Statement[killParams]
	lat           latencies
	inbox         *inventory.Consumer
	posted        atomic.Int64
	postFailed    atomic.Int64
	relayKills    int
	relaysMu      sync.Mutex
	relays        []*relay.Relay // every relay started, for their stats
	acks          atomic.Int64   // deliveries the broker acked, of every relay
	outages       int
}

func (a *app) runDemo(ctx context.Context, f demoFlags) (err error) {
	kill, outage, err := parseFaults(f.faults)
	if err != nil {
		return err
	}
	if f.duration <= 0 {
		return usagef("--duration: must be positive, got %s", f.duration)
	}
	if f.rate < 1 || f.rate > 5000 {
		return usagef("--rate: must be between 1 and 5000, got %d", f.rate)
	}
	if f.outage <= 0 {
		f.outage = max(f.duration/6, time.Second)
	}
	// Progress, fault notes and the components' logs come from several goroutines:
	// each stream is written a whole line at a time.
	out, errOut := &lockedWriter{w: a.out}, &lockedWriter{w: a.errOut}
	d := &demo{a: a, flags: f, progress: out}
	if f.json {
		d.progress = errOut
	}
	// The components' warnings during the injected faults are expected: show only
	// their errors, unless --log-level debug.
	level := slog.LevelError
	if a.cfg.LogLevel <= slog.LevelDebug {
		level = a.cfg.LogLevel
	}
	d.log = newLogger(errOut, level, a.cfg.LogFormat)
	// The orders example lives in the default schema.
	quoted, _ := sqlq.QuoteSchema(relay.DefaultSchema)
	b, _ := queryFiles.ReadFile("queries/demo_reconcile.sql")
	d.reconcileStmt = sqlq.BindText[reconcileParams]("demo_reconcile", sqlq.Render(string(b), quoted))
	b, _ = queryFiles.ReadFile("queries/demo_kill_relay.sql")
	d.killStmt = sqlq.BindText[killParams]("demo_kill_relay", string(b))
	// Cleanup runs after Ctrl-C too: it needs a context of its own.
	bg := context.WithoutCancel(ctx)

	dbURL := a.cfg.DatabaseURL
	if dbURL == "" {
		dbURL = getenv(a.io.Env, "DATABASE_URL")
	}
	if dbURL == "" {
		d.say("starting a throwaway PostgreSQL cluster")
		pg, err := startDemoPostgres(ctx)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer pg.stop()
		dbURL = pg.url()
		d.say("postgres: %s (data in %s, removed at exit)", dbURL, pg.dir)
	} else {
		d.say("postgres: the database of --database-url / DATABASE_URL")
	}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return usageError{dsnError(err)}
	}
	pc.MaxConns = 24
	d.pool, err = pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("demo: database: %w", err)
	}
	defer d.pool.Close()
	// The progress line's own connection: the producer's requests never starve it.
	mc := pc.Copy()
	mc.MaxConns = 1
	if d.monitor, err = pgxpool.NewWithConfig(ctx, mc); err != nil {
		return fmt.Errorf("demo: database: %w", err)
	}
	defer d.monitor.Close()
	// The producer's own pool: its tracer takes the time just before each order's
	// COMMIT is sent, where commit→consume starts.
	d.commits = newCommitClock()
	prc := pc.Copy()
	prc.MaxConns = 16
	prc.ConnConfig.Tracer = d.commits
	if d.producer, err = pgxpool.NewWithConfig(ctx, prc); err != nil {
		return fmt.Errorf("demo: database: %w", err)
	}
	defer d.producer.Close()
	if err := orders.Migrate(ctx, d.pool); err != nil {
		return fmt.Errorf("demo: migrate: %w", err)
	}
	if err := inventory.Migrate(ctx, d.pool); err != nil {
		return fmt.Errorf("demo: migrate: %w", err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	d.sku = "demo-" + hex.EncodeToString(id[:])
	if err := inventory.Seed(ctx, d.pool, d.sku, demoSeed); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.say("migrated; this run's orders are for sku %s", d.sku)

	d.nats, err = startDemoNATS()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer d.nats.remove()
	d.say("nats: embedded JetStream at %s (store in %s, removed at exit)", d.nats.url, d.nats.dir)
	producerJS, closeP, err := demoJetStream(d.nats.url)
	if err != nil {
		return err
	}
	defer closeP()
	consumerJS, closeC, err := demoJetStream(d.nats.url)
	if err != nil {
		return err
	}
	defer closeC()
	if _, err := inventory.EnsureConsumer(ctx, consumerJS); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if d.inbox, err = inventory.New(&inventory.Config{Logger: d.log}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	svc, err := orders.NewService(d.producer, nil)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0") //nolint:noctx // the producer's API
	if err != nil {
		return fmt.Errorf("demo: listen: %w", err)
	}
	// The dashboard (read-only) beside the orders API, on the same listener.
	admin, err := outboxadmin.New(outboxadmin.Options{Pool: d.pool, ReadOnly: true, PathPrefix: adminPrefix, Logger: d.log})
	if err != nil {
		return fmt.Errorf("demo: dashboard: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(adminPrefix, admin)
	mux.Handle("/", orders.NewHandler(svc, d.log))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	d.say("orders API: POST http://%s/orders", ln.Addr())
	d.say("dashboard (read-only): http://%s%s", ln.Addr(), adminPrefix)

	// The components run until stop, which outlives ctx by the drain.
	run, stop := context.WithCancel(bg)
	defer stop()
	var wg sync.WaitGroup
	killReq := make(chan chan killed)
	wg.Go(func() { d.runConsumer(run, consumerJS) })
	wg.Go(func() { d.superviseRelay(run, producerJS, killReq) })
	defer wg.Wait()
	defer stop()

	loadCtx, endLoad := context.WithTimeout(ctx, f.duration)
	defer endLoad()
	start := time.Now()
	var loadWG sync.WaitGroup
	loadWG.Go(func() { d.generateLoad(loadCtx, "http://"+ln.Addr().String()+"/orders") })
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		d.injectFaults(loadCtx, kill, outage, killReq)
	}()
	progressDone := make(chan struct{})
	progressCtx, endProgress := context.WithCancel(bg)
	go func() { defer close(progressDone); d.report(progressCtx, start) }()
	defer func() { endProgress(); <-progressDone }()

	loadWG.Wait()
	<-faultsDone
	interrupted := ctx.Err() != nil
	if !interrupted {
		d.say("load done after %s (%d orders posted, %d failed); draining", time.Since(start).Round(time.Millisecond), d.posted.Load(), d.postFailed.Load())
		d.drain(ctx)
		interrupted = ctx.Err() != nil
	}
	endProgress()
	<-progressDone
	sum, err := d.reconcile(bg)
	if err != nil {
		return err
	}
	sum.Interrupted = interrupted
	if f.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return fmt.Errorf("demo: write the summary: %w", err)
		}
	} else {
		printDemoTable(out, sum)
	}
	switch {
	case interrupted:
		d.say("interrupted: stopped before draining, the figures cover what was done so far")
		return nil
	case sum.Lost != 0 || sum.DoubleEffects != 0 || sum.Published != sum.Committed:
		return exitError{ExitFailure, fmt.Errorf("demo: the reconciliation failed: %d lost, %d double effects, %d of %d published", sum.Lost, sum.DoubleEffects, sum.Published, sum.Committed)}
	}
	return nil
}

// say writes one line of progress.
func (d *demo) say(format string, args ...any) {
	_, _ = fmt.Fprintf(d.progress, "demo: "+format+"\n", args...)
}

// reconcileParams are demo_reconcile.sql's.
type reconcileParams struct {
	SKU    string `sql:"sku"`    // the run's
	Seeded int64  `sql:"seeded"` // the units the SKU was seeded with
}

func (d *demo) reconcileArgs() []any {
	return d.reconcileStmt.Args(&reconcileParams{SKU: d.sku, Seeded: demoSeed})
}

// killParams are demo_kill_relay.sql's.
type killParams struct {
	ApplicationName string `sql:"application_name"` // the killed relay's pool's
}

// reconcile computes the summary from the database.
func (d *demo) reconcile(ctx context.Context) (DemoSummary, error) {
	var s DemoSummary
	err := d.pool.QueryRow(ctx, d.reconcileStmt.SQL, d.reconcileArgs()...).Scan(&s.Committed, &s.Published, &s.Consumed, &s.EffectsApplied, &s.Lost)
	if err != nil {
		return s, fmt.Errorf("demo: reconcile: %w", err)
	}
	s.DoubleEffects = s.EffectsApplied - s.Consumed
	s.DuplicatesSkipped = d.inbox.Inbox().Stats().Duplicates
	s.RelayKills, s.BrokerOutages = d.relayKills, d.outages
	d.relaysMu.Lock()
	for _, r := range d.relays {
		s.BreakerOpens += r.Stats().BreakerOpens
	}
	d.relaysMu.Unlock()
	s.SinkDeliveries = d.acks.Load()
	s.Republished = s.SinkDeliveries - s.Published
	s.P99CommitToConsumeMS = float64(d.lat.p99(0).Microseconds()) / 1000
	return s, nil
}

// demoTableRows are the reconciliation table's rows, in order: label and value.
func demoTableRows(s DemoSummary) [][2]string {
	i := func(n int64) string { return fmt.Sprint(n) }
	return [][2]string{
		{"committed", i(s.Committed)},
		{"published", i(s.Published)},
		{"consumed", i(s.Consumed)},
		{"effects applied", i(s.EffectsApplied)},
		{"duplicates skipped", i(s.DuplicatesSkipped)},
		{"lost", i(s.Lost)},
		{"double effects", i(s.DoubleEffects)},
		{"sink deliveries", i(s.SinkDeliveries)},
		{"republished", i(s.Republished)},
		{"breaker opens", i(s.BreakerOpens)},
		{"relay kills", i(int64(s.RelayKills))},
		{"broker outages", i(int64(s.BrokerOutages))},
		{"p99 commit→consume ms", fmt.Sprintf("%.1f", s.P99CommitToConsumeMS)},
	}
}

// printDemoTable writes the reconciliation: a header line, then one "label  value"
// row a line (the label padded to 24 columns), then the verdict line: "reconciliation
// OK", "FAILED" or "INTERRUPTED (not drained)".
func printDemoTable(w io.Writer, s DemoSummary) {
	_, _ = fmt.Fprintln(w, "reconciliation (from the database)")
	for _, r := range demoTableRows(s) {
		_, _ = fmt.Fprintf(w, "  %-24s %s\n", r[0], r[1])
	}
	verdict := "OK"
	switch {
	case s.Interrupted:
		verdict = "INTERRUPTED (not drained)"
	case s.Lost != 0 || s.DoubleEffects != 0 || s.Published != s.Committed:
		verdict = "FAILED"
	}
	_, _ = fmt.Fprintln(w, "reconciliation "+verdict)
}

// report writes a progress line every second until ctx ends.
func (d *demo) report(ctx context.Context, start time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var s DemoSummary
		err := d.monitor.QueryRow(qctx, d.reconcileStmt.SQL, d.reconcileArgs()...).Scan(&s.Committed, &s.Published, &s.Consumed, &s.EffectsApplied, &s.Lost)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				d.say("progress: %v", err)
			}
			continue
		}
		broker := "up"
		if !d.nats.running() {
			broker = "DOWN"
		}
		_, _ = fmt.Fprintf(d.progress, "[%4ds] written %6d  published %6d  consumed %6d  duplicates skipped %4d  backlog %5d  p99 commit→consume %6.1fms  broker %s\n",
			int(time.Since(start).Seconds()), s.Committed, s.Published, s.Consumed, d.inbox.Inbox().Stats().Duplicates,
			s.Committed-s.Published, float64(d.lat.p99(5*time.Second).Microseconds())/1000, broker)
	}
}

// drain waits until every committed order is published and consumed, or the drain
// timeout.
func (d *demo) drain(ctx context.Context) {
	deadline := time.Now().Add(d.flags.drain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var s DemoSummary
		err := d.pool.QueryRow(ctx, d.reconcileStmt.SQL, d.reconcileArgs()...).Scan(&s.Committed, &s.Published, &s.Consumed, &s.EffectsApplied, &s.Lost)
		if err == nil && s.Published == s.Committed && s.Lost == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	if ctx.Err() == nil {
		d.say("drain: not every event was consumed within %s", d.flags.drain)
	}
}

// generateLoad posts orders at the rate until ctx ends, then waits for the requests in
// flight.
func (d *demo) generateLoad(ctx context.Context, url string) {
	client := &http.Client{Timeout: 10 * time.Second}
	body, _ := json.Marshal(map[string]any{"customer": "demo", "sku": d.sku, "quantity": 1})
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(time.Second / time.Duration(d.flags.rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			d.postFailed.Add(1) // 64 requests in flight: shed this one
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			// Not ctx: a request sent is let finish, so the load's end cuts no commit.
			req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, url, bytes.NewReader(body))
			resp, err := client.Do(req)
			if err != nil {
				d.postFailed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				d.posted.Add(1)
			} else {
				d.postFailed.Add(1)
			}
		})
	}
}

// injectFaults kills the relay at a third of the run and takes the broker away at
// half of it, as asked.
func (d *demo) injectFaults(ctx context.Context, kill, outage bool, killReq chan chan killed) {
	wait := func(until time.Duration, start time.Time) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(start.Add(until))):
			return true
		}
	}
	start := time.Now()
	if kill && wait(d.flags.duration/3, start) {
		reply := make(chan killed, 1)
		select {
		case killReq <- reply:
			k := <-reply
			d.relayKills++
			d.say("FAULT relay killed right after delivering %d events it never marked published; its %d database connections terminated, no graceful stop; a new relay takes over", k.held, k.conns)
		case <-ctx.Done():
		}
	}
	if outage && wait(d.flags.duration/2, start) {
		d.say("FAULT broker outage: NATS shut down for %s", d.flags.outage)
		d.nats.stop()
		d.outages++
		select {
		case <-ctx.Done():
		case <-time.After(d.flags.outage):
		}
		if err := d.nats.start(); err != nil {
			d.say("broker: restart failed: %v", err)
			return
		}
		d.say("broker back on %s", d.nats.url)
	}
}

// superviseRelay runs the relay, a new one after each kill (or failure), until ctx
// ends. A kill request cuts the relay's database connections
// (pg_terminate_backend) and cancels it: its marks in flight are lost, what it had
// published is published again by its successor, and the inbox skips the repeats.
func (d *demo) superviseRelay(ctx context.Context, js jetstream.JetStream, killReq chan chan killed) {
	for gen := 1; ctx.Err() == nil; gen++ {
		app := fmt.Sprintf("outbox-demo-relay-%d", gen)
		pc := d.pool.Config().Copy()
		pc.MaxConns = 8
		pc.ConnConfig.RuntimeParams["application_name"] = app
		rpool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			d.say("relay: %v", err)
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		cs := &crashSink{crash: make(chan struct{}), caught: make(chan struct{}), release: ctx.Done(), acks: &d.acks}
		r, err := d.newRelay(ctx, rpool, js, cs)
		if err != nil {
			rpool.Close()
			if ctx.Err() == nil {
				d.log.Error("relay: start", slog.Any("error", err))
			}
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		d.relaysMu.Lock()
		d.relays = append(d.relays, r)
		d.relaysMu.Unlock()
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		select {
		case <-ctx.Done():
			cancel()
			if err := <-done; err != nil {
				d.log.Error("relay: stop", slog.Any("error", err))
			}
			rpool.Close()
			return
		case err := <-done:
			cancel()
			rpool.Close()
			d.log.Error("relay: stopped; starting another", slog.Any("error", err))
			sleepCtx(ctx, 500*time.Millisecond)
		case reply := <-killReq:
			// The relay dies right after a delivery, before it marks it: the case
			// at-least-once is for. Then its connections go.
			close(cs.crash)
			select {
			case <-cs.caught:
			case <-time.After(2 * time.Second): // no batch in flight: killed idle
			case <-ctx.Done():
			}
			var n int
			if err := d.pool.QueryRow(ctx, d.killStmt.SQL, d.killStmt.Args(&killParams{ApplicationName: app})...).Scan(&n); err != nil {
				d.log.Error("relay: kill", slog.Any("error", err))
			}
			cancel()
			select {
			case err := <-done: // the killed relay's error is expected
				d.log.Debug("relay: killed", slog.Any("error", err))
			case <-time.After(5 * time.Second): // abandoned: its successor does not wait
			}
			go rpool.Close()
			reply <- killed{conns: n, held: cs.held.Load()}
		}
	}
}

// killed is what a relay kill did: the relay's connections terminated, and the
// events it had delivered but not marked.
type killed struct {
	conns int
	held  int64
}

// newRelay is orders.NewRelay with the sink wrapped in cs, the kill switch, and a
// short lease (a killed relay's partitions are taken over within a second) and
// shutdown timeout.
func (d *demo) newRelay(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, cs *crashSink) (*relay.Relay, error) {
	sink, err := natssink.New(ctx, js, &natssink.Config{Stream: orders.Stream, Subject: orders.SubjectTemplate})
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	cs.inner = sink
	r, err := relay.New(pool, cs, &relay.Config{LeaseTTL: time.Second, ShutdownTimeout: time.Second, Logger: d.log})
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	return r, nil
}

// errKilled is the result of the publishes of a killed relay.
var errKilled = errors.New("demo: the relay was killed")

// crashSink is the relay kill's switch on the relay's sink. Once crash is closed,
// the next batch delivered (the one in flight, or else the next one) never returns
// to the relay, as if the process died between the broker's ack and the mark: its
// events stay unpublished in the outbox, and the next relay delivers them again. No
// later batch is delivered. A held publish ends when its context or release does.
type crashSink struct {
	inner     outbox.Sink
	crash     chan struct{}
	caught    chan struct{} // closed once a delivered batch is held
	delivered atomic.Bool   // the one batch delivered after crash
	release   <-chan struct{}
	held      atomic.Int64
	acks      *atomic.Int64 // the deliveries the broker acked, of every relay
}

// Publish delivers msgs, unless the relay is dead; see [crashSink].
func (s *crashSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	select {
	case <-s.crash:
		if s.delivered.CompareAndSwap(false, true) {
			s.hold(s.publish(ctx, msgs))
		}
		return s.hang(ctx, len(msgs))
	default:
	}
	errs := s.publish(ctx, msgs)
	select {
	case <-s.crash:
		if s.delivered.CompareAndSwap(false, true) {
			s.hold(errs)
		}
		return s.hang(ctx, len(msgs))
	default:
		return errs
	}
}

// publish delivers msgs and counts the broker's acks.
func (s *crashSink) publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := s.inner.Publish(ctx, msgs)
	for _, err := range errs {
		if err == nil {
			s.acks.Add(1)
		}
	}
	return errs
}

// hold counts the events of the batch delivered and held.
func (s *crashSink) hold(errs []error) {
	for _, err := range errs {
		if err == nil {
			s.held.Add(1)
		}
	}
	close(s.caught)
}

func (s *crashSink) hang(ctx context.Context, n int) []error {
	select {
	case <-ctx.Done():
	case <-s.release:
	}
	errs := make([]error, n)
	for i := range errs {
		errs[i] = errKilled
	}
	return errs
}

// runConsumer runs the inventory consumer (natssink Runner → inbox) until ctx ends,
// again after each failure (the broker going away).
func (d *demo) runConsumer(ctx context.Context, js jetstream.JetStream) {
	handle := func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		if err := d.inbox.Handle(ctx, tx, msg); err != nil {
			return err
		}
		var e orders.OrderPlaced
		if json.Unmarshal(msg.Payload, &e) == nil {
			if sent, ok := d.commits.take(e.OrderID); ok {
				d.lat.add(time.Since(sent))
			}
		}
		return nil
	}
	for ctx.Err() == nil {
		cons, err := inventory.EnsureConsumer(ctx, js)
		if err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		r, err := natssink.NewRunner(cons, d.pool, d.inbox.Inbox(), handle, &natssink.RunnerConfig{Workers: 8, RetryDelay: 200 * time.Millisecond, Logger: d.log})
		if err != nil {
			d.say("consumer: %v", err)
			return
		}
		if err := r.Run(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("consumer: stopped; starting again", slog.Any("error", err))
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// commitClock is the producer pool's query tracer: it takes the time just before each
// COMMIT of a transaction that inserted an order is sent, by the order's id, for the
// commit→consume latency. Not the order's created_at: that is the transaction's start,
// on the database's clock.
type commitClock struct {
	mu   sync.Mutex
	open map[*pgx.Conn]uuid.UUID // the order each connection's open transaction inserted
	sent map[uuid.UUID]time.Time // taken just before the order's COMMIT was sent
}

func newCommitClock() *commitClock {
	return &commitClock{open: map[*pgx.Conn]uuid.UUID{}, sent: map[uuid.UUID]time.Time{}}
}

// TraceQueryStart runs just before each statement is sent: BEGIN forgets the
// connection's order, the order's INSERT (its first argument the order id) notes it,
// and COMMIT takes the time for it.
func (c *commitClock) TraceQueryStart(ctx context.Context, conn *pgx.Conn, q pgx.TraceQueryStartData) context.Context {
	sql := strings.TrimSpace(q.SQL)
	switch {
	case strings.EqualFold(sql, "commit"):
		now := time.Now()
		c.mu.Lock()
		if id, ok := c.open[conn]; ok {
			c.sent[id] = now
			delete(c.open, conn)
		}
		c.mu.Unlock()
	case strings.HasPrefix(strings.ToLower(sql), "begin"), strings.EqualFold(sql, "rollback"):
		c.mu.Lock()
		delete(c.open, conn)
		c.mu.Unlock()
	case strings.Contains(sql, "INSERT INTO orders"):
		if len(q.Args) > 0 {
			if id, ok := q.Args[0].(uuid.UUID); ok {
				c.mu.Lock()
				c.open[conn] = id
				c.mu.Unlock()
			}
		}
	}
	return ctx
}

// TraceQueryEnd does nothing: the time is taken before the COMMIT is sent.
func (*commitClock) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns (and forgets) the time just before order id's COMMIT was sent.
func (c *commitClock) take(id uuid.UUID) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.sent[id]
	delete(c.sent, id)
	return t, ok
}

// latencies records commit→consume latencies, for their p99.
type latencies struct {
	mu sync.Mutex
	at []time.Time
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.at = append(l.at, time.Now())
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// p99 is the 99th percentile of the latencies recorded in the last window (all of
// them when window is 0).
func (l *latencies) p99(window time.Duration) time.Duration {
	l.mu.Lock()
	var ds []time.Duration
	for i, at := range l.at {
		if window == 0 || time.Since(at) <= window {
			ds = append(ds, l.d[i])
		}
	}
	l.mu.Unlock()
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*99/100)]
}

// lockedWriter serialises the writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p) //nolint:wrapcheck // a writer's error, as it is
}

// demoNATS is the embedded NATS JetStream server, restartable on its port and store.
type demoNATS struct {
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server
	url  string
	dir  string
}

func startDemoNATS() (*demoNATS, error) {
	dir, err := os.MkdirTemp("", "outbox-demo-nats-")
	if err != nil {
		return nil, fmt.Errorf("nats: make the store directory: %w", err)
	}
	n := &demoNATS{dir: dir, opts: server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}}
	if err := n.start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return n, nil
}

// start starts the server (again: on the port and store of the first start).
func (n *demoNATS) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	opts := n.opts
	s, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return errors.New("nats: the embedded server did not start within 10s")
	}
	n.srv = s
	if n.opts.Port == -1 {
		n.opts.Port = s.Addr().(*net.TCPAddr).Port //nolint:forcetypeassert // a TCP listener
	}
	n.url = s.ClientURL()
	return nil
}

// stop shuts the server down (its store stays).
func (n *demoNATS) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

func (n *demoNATS) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv != nil
}

// remove stops the server and removes its store.
func (n *demoNATS) remove() {
	n.stop()
	_ = os.RemoveAll(n.dir)
}

// demoJetStream connects to url as natssink asks (no reconnect buffer), reconnecting
// forever.
func demoJetStream(url string) (jetstream.JetStream, func(), error) {
	nc, err := nats.Connect(url, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("demo: connect to nats at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("demo: jetstream: %w", err)
	}
	return js, nc.Close, nil
}
