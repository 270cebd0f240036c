package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
	"github.com/outboxkit/outbox/relay"
)

// Latency target from the issue: p99 on the default path at the lowest rate.
const (
	targetLatencyP99  = 10 * time.Millisecond
	targetLatencyRate = 500
	producerWorkers   = 16
)

// wakePath is one way the relay learns of new events.
type wakePath struct {
	name     string
	notifier bool // the producer passes a Notifier's AfterCommit to WithTx
	trigger  bool // the NOTIFY trigger is installed
	wakeup   relay.Wakeup
	poll     time.Duration // 0: the relay's default PollInterval
}

var wakePaths = []wakePath{
	{name: "default: Notifier after commit + LISTEN", notifier: true, wakeup: relay.WakeupListen},
	{name: "NOTIFY trigger + LISTEN", trigger: true, wakeup: relay.WakeupListen},
	{name: "polling only, PollInterval 10ms", wakeup: relay.WakeupPoll, poll: 10 * time.Millisecond},
	{name: "polling only, default PollInterval", wakeup: relay.WakeupPoll},
}

// latencyResult is the commit→sink latency of one path at one rate.
type latencyResult struct {
	path     wakePath
	rate     int
	events   int
	achieved float64         // events/s actually committed
	lat      []time.Duration // sorted
}

func (b *bench) latency(ctx context.Context) (partReport, error) {
	var results []latencyResult
	for _, rate := range b.o.rates {
		for _, path := range wakePaths {
			res, err := b.latencyRun(ctx, path, rate)
			if err != nil {
				return partReport{}, fmt.Errorf("%s at %d events/s: %w", path.name, rate, err)
			}
			fmt.Fprintf(os.Stderr, "latency %5d/s %-42s p50 %6.2f p99 %7.2f max %7.2f ms\n", rate, path.name,
				ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), ms(res.lat[len(res.lat)-1]))
			results = append(results, res)
		}
	}
	return b.latencyReport(results), nil
}

// latencyRun runs a relay child for path, produces rate events/s for the configured
// duration, and joins the producer's commit times with the child's receipts.
func (b *bench) latencyRun(ctx context.Context, path wakePath, rate int) (latencyResult, error) {
	if err := resetForRelay(ctx, b.pool, relay.Ordered); err != nil {
		return latencyResult{}, err
	}
	if path.trigger {
		if err := relay.InstallNotifyTrigger(ctx, b.pool, ""); err != nil {
			return latencyResult{}, err
		}
	}
	dir, err := os.MkdirTemp("", "relaybench-")
	if err != nil {
		return latencyResult{}, fmt.Errorf("temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	receipts := filepath.Join(dir, "receipts")
	c, err := startChild(ctx, childConfig{
		DSN: b.o.dsn, DB: b.o.database, Instances: 1, Sink: sinkRecord, Receipts: receipts,
		Relay: relay.Config{Wakeup: path.wakeup, PollInterval: path.poll},
	})
	if err != nil {
		return latencyResult{}, err
	}
	ids, commits, achieved, err := b.produce(ctx, path, rate)
	if err == nil {
		err = b.waitPublished(ctx, len(ids))
	}
	if err == nil {
		err = c.send("STOP")
	}
	if err != nil {
		c.kill()
		return latencyResult{}, err
	}
	if _, err := c.result(); err != nil {
		return latencyResult{}, err
	}
	got, err := readReceipts(receipts)
	if err != nil {
		return latencyResult{}, err
	}
	lat, err := join(ids, commits, got)
	if err != nil {
		return latencyResult{}, err
	}
	return latencyResult{path: path, rate: rate, events: len(ids), achieved: achieved, lat: lat}, nil
}

// produce commits one event per transaction at rate events/s for the configured
// duration (an open schedule: event i is due at start + i/rate) and returns each
// event's id and the wall-clock time COMMIT returned, recorded by the first
// after-commit hook of WithTx.
func (b *bench) produce(ctx context.Context, path wakePath, rate int) ([]uuid.UUID, []int64, float64, error) {
	var hooks []outbox.AfterCommitFunc
	if path.notifier {
		n, err := outbox.NewNotifier(b.pool, nil)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("new notifier: %w", err)
		}
		defer n.Close()
		hooks = append(hooks, n.AfterCommit)
	}
	total := int(float64(rate) * b.o.latencyDuration.Seconds())
	ids := make([]uuid.UUID, total)
	commits := make([]int64, total)
	for i := range ids {
		ids[i] = outbox.NewID()
	}
	interval := time.Second / time.Duration(rate)
	due := make(chan int, producerWorkers)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	g.Go(func() error {
		defer close(due)
		for i := range total {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				if err := sleepCtx(gctx, d); err != nil {
					return err
				}
			}
			select {
			case due <- i:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for w := range producerWorkers {
		rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(w))) //nolint:gosec // load generation
		g.Go(func() error {
			for i := range due {
				e := benchdb.Event(1 + rng.IntN(benchdb.Accounts))
				e.ID = ids[i]
				record := func(context.Context) { commits[i] = time.Now().UnixNano() }
				err := outbox.WithTx(gctx, b.pool, func(tx pgx.Tx) error {
					return outbox.Enqueue(gctx, outbox.PgxTx(tx), e)
				}, append([]outbox.AfterCommitFunc{record}, hooks...)...)
				if err != nil {
					return fmt.Errorf("produce event %d: %w", i, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, 0, err
	}
	return ids, commits, float64(total) / time.Since(start).Seconds(), nil
}

// waitPublished waits until n events are published.
func (b *bench) waitPublished(ctx context.Context, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var published int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`).Scan(&published); err != nil {
			return fmt.Errorf("count published: %w", err)
		}
		if published >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events published after 2 minutes", published, n)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("wait for the relay: %w", err)
		}
	}
}

// readReceipts reads the child's "id unix-ns" lines; the first receipt of an id wins.
func readReceipts(path string) (map[uuid.UUID]int64, error) {
	f, err := os.Open(path) //nolint:gosec // our own temporary file
	if err != nil {
		return nil, fmt.Errorf("open receipts: %w", err)
	}
	defer func() { _ = f.Close() }()
	out := map[uuid.UUID]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		idText, atText, ok := strings.Cut(sc.Text(), " ")
		id, err := uuid.Parse(idText)
		if !ok || err != nil {
			return nil, fmt.Errorf("bad receipt line %q", sc.Text())
		}
		at, err := strconv.ParseInt(atText, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad receipt line %q: %w", sc.Text(), err)
		}
		if _, seen := out[id]; !seen {
			out[id] = at
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	return out, nil
}

// join returns, sorted, each event's latency from commit to receipt; every event must
// have been received.
func join(ids []uuid.UUID, commits []int64, receipts map[uuid.UUID]int64) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, len(ids))
	for i, id := range ids {
		at, ok := receipts[id]
		if !ok {
			return nil, fmt.Errorf("event %s was committed but never reached the sink", id)
		}
		lat = append(lat, time.Duration(at-commits[i]))
	}
	slices.Sort(lat)
	return lat, nil
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of sorted, or 0
// when sorted is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (b *bench) latencyReport(results []latencyResult) partReport {
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Commit → publish latency\n\n")
	p("A producer process commits one event per transaction (`outbox.WithTx` + `Enqueue`, %d workers on an open schedule) at a steady rate for %s; ", producerWorkers, b.o.latencyDuration)
	p("one relay (default settings: ordered, BatchSize 100, MaxPerAggregate 10) runs in a child process with a sink that records when each message arrives. ")
	p("Latency = the sink's receipt time − the time COMMIT returned (recorded by WithTx's first after-commit hook), both `time.Now()` wall clock on one machine, joined by event id. ")
	p("Paths: the default (the producer passes `outbox.Notifier.AfterCommit`, the relay LISTENs), the opt-in trigger (`relay.InstallNotifyTrigger`, relay LISTENs), ")
	p("and polling only (`Wakeup: WakeupPoll`) at PollInterval 10ms (the plain-polling reference) and at the relay's default PollInterval (500ms). Milliseconds:\n\n")
	p("| rate (events/s) | path | events | achieved rate | p50 | p95 | p99 | max |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	var targets []string
	for _, r := range results {
		p99 := percentile(r.lat, 99)
		p("| %d | %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f |\n", r.rate, r.path.name, r.events, r.achieved,
			ms(percentile(r.lat, 50)), ms(percentile(r.lat, 95)), ms(p99), ms(r.lat[len(r.lat)-1]))
		if r.path.notifier && r.rate == targetLatencyRate {
			targets = append(targets, fmt.Sprintf("Latency, default path at %d events/s, p99 ≤ %s: %s — p99 %.2f ms.",
				r.rate, targetLatencyP99, benchreport.Met(p99 <= targetLatencyP99), ms(p99)))
		}
	}
	return partReport{md: md.String(), targets: targets}
}
