// Command relaybench measures the outbox relay: how fast it drains a backlog compared
// with the best plain-SQL loop making the same state change (drain), how ordered mode
// scales out over relay instances against a slow sink (scale), the time from a
// producer's COMMIT to the sink per wake-up path (latency), whether one aggregate's
// trouble (a flooding type, a hot aggregate, a stalled message) delays the others and
// whether any claim shape degenerates (isolation), what each wake-up path
// costs writers (writer), and the claim queries' plans on empty, drained and large
// tables (claim). Run only when named, the peers part measures the latency and the
// producer's cost beside real peers (the watermill-sql forwarder, River) and the
// plain-SQL follow loop, with one business transaction for all (see bench/PEERS.md).
// Run only when named and alone, the cdc part compares change data capture (package
// cdc) with the polling relay on a throwaway cluster with wal_level=logical that it
// starts (pgtest.StartCluster, with the settings of the server at 5432; -dsn is then
// not used): a burst of -events events written while each relay idles (its drain, from
// the first commit to the last event published; CDC sees only what commits after its
// slot exists, so it cannot be started on a backlog), and the commit→publish latency
// at -rates. With RELAYBENCH_CDC_TRACE set, its CDC children print every 100ms what the
// Source read from the WAL and had published. With RELAYBENCH_CPUPROFILE set to a
// directory, every relay child writes a CPU profile of its run there.
//
// Against a PostgreSQL server it creates a database of its own (dropped and recreated
// at start) and migrates a fresh outbox schema before every measurement. Relays run in
// child processes (this program re-executed), so their peak RSS is their own and the
// latency producer and relay are separate processes. Every part prints its tables;
// with -out they are written to the "Relay" section of that file (replaced or
// appended; other sections are kept).
//
// Usage (from bench/):
//
//	go run ./cmd/relaybench -part all -out RESULTS.md
//	go run ./cmd/relaybench -part drain -events 50000
//	go run ./cmd/relaybench -part peers -peers watermill,river -rates 500 -latency-duration 15s -latency-rounds 2
//	go run ./cmd/relaybench -part cdc -events 20000 -rates 500 -latency-duration 15s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
	"github.com/outboxkit/outbox/relay"
)

// parts lists the parts in the order -part all runs them.
var parts = []string{"drain", "scale", "latency", "isolation", "writer", "claim"}

// extraParts run only when named, after the others: peers (the latency beside
// watermill and River, which take minutes more), and cdc (alone: on a cluster of its
// own).
var extraParts = []string{"peers", "cdc"}

type options struct {
	dsn, database, part, out string

	events, aggregates, batch, maxPerAggregate int
	limitBatches, limitWorkers                 []int
	retentions                                 []relay.RetentionMode
	orderedSweep                               [][2]int     // BatchSize, MaxPerAggregate
	drainRounds                                int          // rounds of the main drain table (limit and relays each round)
	modes                                      []relay.Mode // drain: relay modes of the main table

	scaleEvents  int
	scaleLatency time.Duration

	rates           []int
	latencyDuration time.Duration
	latencyRounds   int      // latency, peers: rounds of the whole set
	latencyPaths    []string // latency: the keys of the paths to run
	latencyDrained  int      // latency: published rows left behind before each run
	// latency: more runs of the default path, one with each of these ClaimCooldowns
	latencyCooldowns []time.Duration
	peers            []string // peers: the real peers measured besides the relay and the plain loop

	writerClients, writerRuns int
	writerDuration            time.Duration

	claimRows int
	sqlDir    string

	isolationScenarios []string           // isolation: the scenarios to run
	isolationRounds    int                // isolation: rounds of every scenario
	isolationFlood     int                // isolation: events of the flooding type
	isolationFloodTime time.Duration      // isolation: how long the flood takes to write
	isolationHot       int                // isolation: events of the hot aggregate (and of the one-aggregate drain)
	isolationStall     time.Duration      // isolation: how long the sink holds the stalled message
	isolationCooldown  time.Duration      // isolation: the relays' ClaimCooldown (0: the default)
	isolationBatch     int                // isolation: the relays' BatchSize (0: the default)
	isolationWorkers   int                // isolation: the relays' Concurrency (0: the default)
	isolationIsolated  []string           // isolation: the relays' IsolatedTypes
	isolationRates     map[string]float64 // isolation: the relays' TypeRates
	isolationRetention string             // isolation: the relays' retention mode ("": the default)

	cdcPoll     time.Duration // cdc: the PollInterval of the relay beside the Source
	cdcWriters  int           // cdc: the burst's producer connections
	cdcSettings []string      // cdc: settings appended to the cluster's
}

func main() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	var o options
	var limitBatches, limitWorkers, rates string
	flag.StringVar(&o.dsn, "dsn", benchdb.DefaultDSN, "PostgreSQL server to benchmark (any database; the benchmark creates its own)")
	flag.StringVar(&o.database, "db", "outbox_relaybench", "database to drop, create and benchmark in")
	flag.StringVar(&o.part, "part", "all", "parts to run, comma-separated: "+strings.Join(parts, ", ")+", or all; also "+strings.Join(extraParts, ", ")+" (not in all)")
	flag.StringVar(&o.out, "out", "", `file whose "Relay" section receives the results (replaced or appended); empty: stdout only`)
	flag.IntVar(&o.events, "events", 200_000, "drain: events in the backlog")
	flag.IntVar(&o.aggregates, "aggregates", 1000, "drain, scale, claim: aggregates the events are spread over")
	flag.IntVar(&o.batch, "batch", 1000, "drain, scale, claim: relay BatchSize (heads, in ordered mode)")
	flag.IntVar(&o.maxPerAggregate, "max-per-aggregate", 200, "drain, scale, claim: relay MaxPerAggregate (ordered mode)")
	retention := flag.String("retention", "keep-then-delete,delete-on-publish,keep-then-archive", "drain: retention modes to measure, comma-separated")
	modes := flag.String("modes", "unordered,ordered", "drain: relay modes to measure, comma-separated")
	sweep := flag.String("ordered-sweep", "100x10,100x50", "drain: other ordered settings (BatchSize x MaxPerAggregate) tried in the first retention mode")
	flag.StringVar(&limitBatches, "limit-batches", "100,1000", "drain: batch sizes tried for the plain-SQL limit")
	flag.StringVar(&limitWorkers, "limit-workers", "1,4", "drain: concurrent loops tried for the plain-SQL limit")
	flag.IntVar(&o.drainRounds, "drain-rounds", 3, "drain: rounds of the main table, each measuring the limit and every relay again; ratios are judged on their median (this machine's drain figures swing 10-20 points between runs)")
	flag.IntVar(&o.scaleEvents, "scale-events", 20_000, "scale: events in the backlog")
	flag.DurationVar(&o.scaleLatency, "scale-latency", time.Millisecond, "scale: sink latency per message")
	flag.StringVar(&rates, "rates", "500,2000", "latency: steady producer rates, events/s")
	flag.DurationVar(&o.latencyDuration, "latency-duration", 15*time.Second, "latency, peers: length of one producer run")
	latencyPaths := flag.String("latency-paths", strings.Join(latencyPathKeys(), ","), "latency: paths to run, comma-separated, of "+strings.Join(latencyPathKeys(), ", "))
	cooldowns := flag.String("latency-cooldowns", "", "latency: ClaimCooldowns of more runs of the default path, comma-separated (e.g. 2ms,10ms)")
	flag.IntVar(&o.latencyDrained, "latency-drained", 0, "latency: rows drained before each run (inserted, marked published by one UPDATE, ANALYZE, no VACUUM)")
	flag.IntVar(&o.latencyRounds, "latency-rounds", 2, "latency, peers: rounds of the whole set of paths or configurations, one after the other")
	peers := flag.String("peers", peerWatermill+","+peerRiver, "peers: real peers measured beside this relay and the plain-SQL follow loop, comma-separated: "+peerWatermill+", "+peerRiver)
	flag.IntVar(&o.writerClients, "writer-clients", 32, "writer: concurrent clients")
	flag.IntVar(&o.writerRuns, "writer-runs", 5, "writer: interleaved runs per wake-up path; the median is reported")
	flag.DurationVar(&o.writerDuration, "writer-duration", 5*time.Second, "writer: length of one run")
	isolationScenarios := flag.String("isolation-scenarios", strings.Join(isolationScenarioKeys, ","), "isolation: scenarios to run, comma-separated, of "+strings.Join(isolationScenarioKeys, ", "))
	flag.IntVar(&o.isolationRounds, "isolation-rounds", 3, "isolation: rounds of every scenario (control and troubled runs, the claim shapes); ratios are judged on their median")
	flag.IntVar(&o.isolationFlood, "isolation-flood", 100_000, "isolation: events of the flooding type")
	flag.DurationVar(&o.isolationFloodTime, "isolation-flood-time", 8*time.Second, "isolation: how long the flood takes to write")
	flag.IntVar(&o.isolationHot, "isolation-hot", 10_000, "isolation: events of the hot aggregate, and of the one-aggregate drain at MaxPerAggregate 1")
	flag.DurationVar(&o.isolationStall, "isolation-stall", 2*time.Second, "isolation: how long the sink holds the stalled message")
	flag.StringVar(&o.isolationRetention, "isolation-retention", "", "isolation: the relays' retention mode (keep-then-delete, delete-on-publish, keep-then-archive; empty: the default)")
	flag.DurationVar(&o.isolationCooldown, "isolation-cooldown", 0, "isolation: the relays' ClaimCooldown (0: the default; negative: none)")
	flag.IntVar(&o.isolationBatch, "isolation-batch", 0, "isolation: the relays' BatchSize (0: the default)")
	flag.IntVar(&o.isolationWorkers, "isolation-concurrency", 0, "isolation: the relays' Concurrency (0: the default)")
	typeRates := flag.String("isolation-type-rates", "", "isolation: the relays' TypeRates, type=events a second, comma-separated (e.g. flood=4000)")
	isolated := flag.String("isolation-isolated-types", "", "isolation: the relays' IsolatedTypes, comma-separated (e.g. flood; needs -isolation-concurrency 2 or more)")
	flag.IntVar(&o.claimRows, "claim-rows", 1_000_000, "claim: published rows behind the pending ones")
	flag.DurationVar(&o.cdcPoll, "cdc-poll-interval", 30*time.Second, "cdc: PollInterval of the relay beside the cdc.Source (WakeupPoll): when its polling claims take up what CDC left")
	flag.IntVar(&o.cdcWriters, "cdc-writers", 4, "cdc: connections the burst's producer writes on")
	cdcSettings := flag.String("cdc-settings", "", `cdc: postgresql.conf lines appended to the cluster's, separated by ";" (e.g. "synchronous_commit = off")`)
	flag.StringVar(&o.sqlDir, "sqldir", "../internal/sqlq/queries", "claim: directory of the relay's .sql files")
	flag.Parse()

	err := errors.Join(parseRetentions(*retention, &o.retentions), parsePairs(*sweep, &o.orderedSweep), parseModes(*modes, &o.modes), parseInts(limitBatches, &o.limitBatches), parseInts(limitWorkers, &o.limitWorkers), parseInts(rates, &o.rates), parsePeers(*peers, &o.peers), parseTypeRates(*typeRates, &o.isolationRates))
	o.latencyPaths = strings.Split(*latencyPaths, ",")
	if *isolated != "" {
		o.isolationIsolated = strings.Split(*isolated, ",")
	}
	o.isolationScenarios = strings.Split(*isolationScenarios, ",")
	for _, k := range o.isolationScenarios {
		if !slices.Contains(isolationScenarioKeys, k) {
			err = errors.Join(err, fmt.Errorf("-isolation-scenarios: no scenario %q (scenarios: %s)", k, strings.Join(isolationScenarioKeys, ", ")))
		}
	}
	for f := range strings.SplitSeq(*cooldowns, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, perr := time.ParseDuration(f)
		if perr != nil || d <= 0 {
			err = errors.Join(err, fmt.Errorf("-latency-cooldowns: %q is not a positive duration", f))
		}
		o.latencyCooldowns = append(o.latencyCooldowns, d)
	}
	for _, k := range o.latencyPaths {
		if !slices.Contains(latencyPathKeys(), k) {
			err = errors.Join(err, fmt.Errorf("-latency-paths: no path %q (paths: %s)", k, strings.Join(latencyPathKeys(), ", ")))
		}
	}
	for f := range strings.SplitSeq(*cdcSettings, ";") {
		if f = strings.TrimSpace(f); f != "" {
			o.cdcSettings = append(o.cdcSettings, f)
		}
	}
	if o.latencyRounds < 1 {
		err = errors.Join(err, errNoPeersRounds)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, o)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relaybench:", err)
		os.Exit(1)
	}
}

func parseInts(s string, into *[]int) error {
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want positive integers separated by commas", s)
		}
		*into = append(*into, n)
	}
	return nil
}

// parseTypeRates reads type=rate items, comma-separated (none: s empty).
func parseTypeRates(s string, into *map[string]float64) error {
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		t, v, ok := strings.Cut(f, "=")
		r, err := strconv.ParseFloat(v, 64)
		if !ok || t == "" || err != nil || r <= 0 {
			return fmt.Errorf("-isolation-type-rates: %q: want type=events a second, a positive rate", f)
		}
		if *into == nil {
			*into = map[string]float64{}
		}
		(*into)[t] = r
	}
	return nil
}

func parseRetentions(s string, into *[]relay.RetentionMode) error {
	for f := range strings.SplitSeq(s, ",") {
		m := relay.RetentionMode(strings.TrimSpace(f))
		if m != relay.KeepThenDelete && m != relay.DeleteOnPublish && m != relay.KeepThenArchive {
			return fmt.Errorf("-retention: unknown mode %q", m)
		}
		*into = append(*into, m)
	}
	return nil
}

func parsePairs(s string, into *[][2]int) error {
	if s == "" {
		return nil
	}
	for f := range strings.SplitSeq(s, ",") {
		var a, b int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%dx%d", &a, &b); err != nil || a < 1 || b < 1 {
			return fmt.Errorf("%q: want pairs like 100x10 separated by commas", s)
		}
		*into = append(*into, [2]int{a, b})
	}
	return nil
}

// selectedParts returns the parts -part names, in run order.
func selectedParts(spec string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(spec, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "all":
			out = append(out, parts...)
			continue
		case !slices.Contains(parts, f) && !slices.Contains(extraParts, f):
			return nil, fmt.Errorf("-part: unknown part %q (want %s, %s or all)", f, strings.Join(parts, ", "), strings.Join(extraParts, ", "))
		}
		out = append(out, f)
	}
	return slices.DeleteFunc(slices.Concat(parts, extraParts), func(p string) bool { return !slices.Contains(out, p) }), nil
}

func run(ctx context.Context, o options) error {
	selected, err := selectedParts(o.part)
	if err != nil {
		return err
	}
	if slices.Contains(selected, "claim") {
		if _, err := os.Stat(filepath.Join(o.sqlDir, "claim_ordered.sql")); err != nil {
			return fmt.Errorf("the claim part reads the relay's SQL from -sqldir (run from bench/): %w", err)
		}
	}
	if slices.Contains(selected, "cdc") {
		if len(selected) > 1 {
			return errors.New("-part cdc runs alone (on a cluster of its own)")
		}
		cluster, err := startCDCCluster(o.cdcSettings)
		if err != nil {
			return err
		}
		defer func() {
			if err := cluster.Destroy(); err != nil {
				fmt.Fprintln(os.Stderr, "relaybench: destroy the cdc cluster:", err)
			}
		}()
		o.dsn = cluster.TCPConnString("postgres")
	}
	pool, err := benchdb.Setup(ctx, o.dsn, o.database, int32(o.writerClients+8))
	if err != nil {
		return err
	}
	defer pool.Close()
	b := &bench{o: o, pool: pool}

	rep := report{started: time.Now(), opts: o, loadStart: benchreport.LoadAvg(), code: codeVersion(ctx)}
	if rep.machine, err = benchreport.DescribeMachine(ctx, pool); err != nil {
		return err
	}
	for _, p := range selected {
		fmt.Fprintf(os.Stderr, "== %s\n", p)
		var pr partReport
		switch p {
		case "drain":
			pr, err = b.drain(ctx)
		case "scale":
			pr, err = b.scale(ctx)
		case "latency":
			pr, err = b.latency(ctx)
		case "isolation":
			pr, err = b.isolation(ctx)
		case "writer":
			pr, err = b.writer(ctx)
		case "claim":
			pr, err = b.claim(ctx)
		case "peers":
			pr, err = b.peers(ctx)
		case "cdc":
			pr, err = b.cdc(ctx)
		}
		if err != nil {
			return fmt.Errorf("part %s: %w", p, err)
		}
		fmt.Print(pr.md, "\n")
		for _, t := range pr.targets {
			fmt.Println("- " + t)
		}
		rep.parts = append(rep.parts, pr)
	}
	rep.loadEnd = benchreport.LoadAvg()
	if err := benchdb.ResetOutbox(ctx, pool); err != nil {
		return err
	}
	if o.out != "" {
		if err := benchreport.WriteSection(o.out, sectionTitle, rep.markdown()); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote section %q of %s\n", sectionTitle, o.out)
	}
	return nil
}

func parseModes(s string, out *[]relay.Mode) error {
	for f := range strings.SplitSeq(s, ",") {
		switch m := relay.Mode(strings.TrimSpace(f)); m {
		case relay.Ordered, relay.Unordered:
			*out = append(*out, m)
		default:
			return fmt.Errorf("-modes: unknown relay mode %q", f)
		}
	}
	return nil
}
