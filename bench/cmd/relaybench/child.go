package main

// The relay runs in a child process (this program re-executed with childEnv set), so
// its peak RSS is its own and, for latency, producer and relay are separate processes
// as in production. Protocol, one line each: the child prints "READY" once every
// relay holds its share of leases (and listens, with WakeupListen); the parent sends
// "GO" (the child wakes every relay and starts its clock) and "STOP" (or closes stdin);
// the child prints "RESULT <json>" and exits. With Expect > 0 the child stops by
// itself once its relays have published (committed) that many events.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/cdc"
	"github.com/outboxkit/outbox/relay"
)

// childEnv holds a child's configuration (JSON); set, the program runs as a child.
const childEnv = "RELAYBENCH_CHILD"

// childConfig is what a relay child runs.
type childConfig struct {
	DSN, DB    string
	Instances  int
	Relay      relay.Config // only plain fields: Mode, BatchSize, Wakeup, intervals, Retention…
	Sink       string       // a sink kind
	Latency    time.Duration
	Expect     int64  // > 0: stop once this many events are published
	CheckOrder bool   // count per-aggregate order violations
	Receipts   string // record sink: file for the receipts
	Timeout    time.Duration
	JITOff     bool // SET jit = off in the relays' sessions
	// AppName is the application_name of the relays' connections (empty: relayApp).
	AppName string
	// Cold: the relays start at GO (not before READY): no lease held, no peer counted.
	Cold bool
	// FollowLoop > 0: instead of relays, run the plain-SQL follow loop polling this
	// often (the latency part's peer), recording receipts.
	FollowLoop time.Duration
	// Peer set: instead of relays, run that peer's consumer (peerWatermill,
	// peerRiver), recording receipts; PeerPoll is its poll interval (watermill's
	// PollInterval; River's FetchCooldown and FetchPollInterval, 0: River's defaults).
	Peer     string
	PeerPoll time.Duration
	// CDC set: a cdc.Source reading the replication slot of that name (and its
	// publication, both created when missing) runs beside the child's one relay; READY
	// waits until it streams.
	CDC string
}

// childResult is what a child reports.
type childResult struct {
	Elapsed         time.Duration // GO until Expect events were published (committed)
	PeakRSSKiB      int64         // VmHWM of the child
	CPU             time.Duration // user + system CPU time of the child from GO to the end
	Acked           int64         // messages acknowledged by the sinks
	OrderViolations int64
	Stats           relay.Stats // summed over the relays
	Statements      int64       // the follow loop's statements
	DoneAt          int64       // wall clock (unix ns) when Expect events were published
	CDC             cdc.Stats   // the Source's, with CDC
}

// childMain runs the child process and returns its exit code.
func childMain(spec string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "relaybench child: bad config:", err)
		return 2
	}
	if err := runChild(cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "relaybench child:", err)
		return 1
	}
	return 0
}

func runChild(cfg childConfig, in io.Reader, out io.Writer) error {
	if cfg.FollowLoop > 0 {
		return runFollowLoopChild(cfg, in, out)
	}
	if cfg.Peer != "" {
		return runPeerChild(cfg, in, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := newCounter(cfg.CheckOrder)
	rec := &recordSink{}
	var (
		relays []*relay.Relay
		pools  []*pgxpool.Pool
		wg     sync.WaitGroup
		errMu  sync.Mutex
		runErr error
	)
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for i := range cfg.Instances {
		params := map[string]string{"application_name": cmp.Or(cfg.AppName, relayApp)}
		if cfg.JITOff {
			params["jit"] = "off"
		}
		pool, err := benchdb.Open(ctx, cfg.DSN, cfg.DB, 8, params)
		if err != nil {
			return err
		}
		pools = append(pools, pool)
		sink, err := newSink(cfg.Sink, cfg.Latency, c, rec)
		if err != nil {
			return err
		}
		rc := cfg.Relay
		rc.Logger = log.With(slog.Int("relay", i))
		r, err := relay.New(pool, sink, &rc)
		if err != nil {
			return fmt.Errorf("relay %d: %w", i, err)
		}
		relays = append(relays, r)
	}
	runCtx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	startRelays := func() {
		for i, r := range relays {
			wg.Go(func() {
				if err := r.Run(runCtx); err != nil {
					errMu.Lock()
					runErr = errors.Join(runErr, fmt.Errorf("relay %d: %w", i, err))
					errMu.Unlock()
					stopRelays()
				}
			})
		}
	}
	if !cfg.Cold {
		startRelays()
		if err := waitReady(runCtx, cfg, relays); err != nil {
			stopRelays()
			wg.Wait()
			return errors.Join(err, runErr)
		}
	}
	var src *cdc.Source
	if cfg.CDC != "" {
		var err error
		if src, err = startSource(runCtx, cfg, pools, relays, log, &wg, func(err error) {
			errMu.Lock()
			runErr = errors.Join(runErr, err)
			errMu.Unlock()
			stopRelays()
		}); err != nil {
			stopRelays()
			wg.Wait()
			return errors.Join(err, runErr)
		}
	}
	if src != nil && os.Getenv(cdcTraceEnv) != "" {
		go traceSource(runCtx, src, relays)
	}
	if err := startProfile(); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	if _, err := fmt.Fprintln(out, "READY"); err != nil {
		return fmt.Errorf("report ready: %w", err)
	}

	cmds := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			cmds <- strings.TrimSpace(sc.Text())
		}
		close(cmds)
	}()
	var (
		res        childResult
		started    time.Time
		cpuAtStart time.Duration
		tick       <-chan time.Time
	)
	timeout := time.After(cfg.Timeout)
wait:
	for {
		select {
		case cmd, ok := <-cmds:
			switch {
			case !ok || cmd == "STOP":
				break wait
			case cmd == "GO":
				started, cpuAtStart = time.Now(), cpuTime()
				if cfg.Cold {
					startRelays()
				}
				for _, r := range relays {
					r.Wake()
				}
				if cfg.Expect > 0 {
					t := time.NewTicker(time.Millisecond)
					defer t.Stop()
					tick = t.C
				}
			}
		case <-tick:
			if published(relays) >= cfg.Expect {
				res.Elapsed, res.DoneAt = time.Since(started), time.Now().UnixNano()
				break wait
			}
		case <-runCtx.Done():
			break wait
		case <-timeout:
			stopRelays()
			wg.Wait()
			return fmt.Errorf("timed out after %s: %d of %d published; stats %+v", cfg.Timeout, published(relays), cfg.Expect, sumStats(relays))
		}
	}
	stopRelays()
	wg.Wait()
	res.CPU = cpuTime() - cpuAtStart
	if runErr != nil {
		return runErr
	}
	res.PeakRSSKiB = peakRSS()
	res.Acked = c.acked.Load()
	res.OrderViolations = c.violations.Load()
	res.Stats = sumStats(relays)
	if src != nil {
		res.CDC = src.Stats()
	}
	if cfg.Receipts != "" {
		if err := rec.writeTo(cfg.Receipts); err != nil {
			return err
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if _, err := fmt.Fprintf(out, "RESULT %s\n", b); err != nil {
		return fmt.Errorf("report result: %w", err)
	}
	return nil
}

// startSource starts a cdc.Source on slot cfg.CDC beside the child's one relay (in wg,
// reporting a failure to fail) and waits until it streams; then a moment more, for
// the polling claims that a new slot wakes to find the table empty.
func startSource(ctx context.Context, cfg childConfig, pools []*pgxpool.Pool, relays []*relay.Relay, log *slog.Logger, wg *sync.WaitGroup, fail func(error)) (*cdc.Source, error) {
	if len(relays) != 1 {
		return nil, fmt.Errorf("change data capture runs beside one relay, not %d", len(relays))
	}
	src, err := cdc.New(pools[0], relays[0], &cdc.Config{Slot: cfg.CDC, Logger: log.With(slog.String("component", "cdc"))})
	if err != nil {
		return nil, err
	}
	wg.Go(func() {
		if err := src.Run(ctx); err != nil {
			fail(fmt.Errorf("cdc source: %w", err))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for !src.Stats().Streaming {
		if time.Now().After(deadline) {
			return nil, errors.New("the cdc source does not stream after a minute")
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, fmt.Errorf("wait for the cdc source: %w", err)
		}
	}
	return src, sleepCtx(ctx, 200*time.Millisecond)
}

// cdcTraceEnv, when set, has a child with a cdc.Source print every 100ms what the
// Source has read from the WAL and had published, and what its relay published: where
// CDC spends a burst's time (reading or publishing).
const cdcTraceEnv = "RELAYBENCH_CDC_TRACE"

func traceSource(ctx context.Context, src *cdc.Source, relays []*relay.Relay) {
	t0 := time.Now()
	for ctx.Err() == nil {
		st := src.Stats()
		fmt.Fprintf(os.Stderr, "cdc trace %5d ms: read %6d events in %4d transactions, published by CDC %6d, by the relay %6d\n",
			time.Since(t0).Milliseconds(), st.Events, st.Transactions, st.Published, published(relays))
		_ = sleepCtx(ctx, 100*time.Millisecond)
	}
}

// waitReady waits until, in ordered mode, the relays hold every lease in equal shares;
// in unordered mode with the default Concurrency, each runs its share of the default (2
// batches among them all, at least 1 each: they have counted each other); and, with
// WakeupListen, every listener passed its self-test.
func waitReady(ctx context.Context, cfg childConfig, relays []*relay.Relay) error {
	partitions := cfg.Relay.Partitions
	if partitions == 0 {
		partitions = 16
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready := true
		for _, r := range relays {
			st := r.Stats()
			held := st.LeasesAcquired - st.LeasesReleased - st.LeasesLost
			if cfg.Relay.Mode != relay.Unordered && held != int64(partitions/len(relays)) {
				ready = false
			}
			if cfg.Relay.Mode == relay.Unordered && cfg.Relay.Concurrency == 0 && st.Workers != max(1, 2/len(relays)) {
				ready = false
			}
			if cfg.Relay.Wakeup != relay.WakeupPoll && !st.WakeupListening {
				ready = false
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("relays not ready after 2 minutes (leases or the default Concurrency not shared out, or listener not listening): %+v", sumStats(relays))
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("wait for relays to be ready: %w", err)
		}
	}
}

func published(relays []*relay.Relay) int64 {
	var n int64
	for _, r := range relays {
		n += r.Stats().Published
	}
	return n
}

// sumStats adds up the counters of relays (WakeupListening: all of them listen).
func sumStats(relays []*relay.Relay) relay.Stats {
	var s relay.Stats
	s.WakeupListening = len(relays) > 0
	for _, r := range relays {
		x := r.Stats()
		s.Published += x.Published
		s.Retried += x.Retried
		s.Dead += x.Dead
		s.Batches += x.Batches
		s.BreakerOpens += x.BreakerOpens
		s.SinkDownBatches += x.SinkDownBatches
		s.Errors += x.Errors
		s.Purged += x.Purged
		s.LeasesAcquired += x.LeasesAcquired
		s.LeasesRescued += x.LeasesRescued
		s.LeasesLost += x.LeasesLost
		s.LeasesReleased += x.LeasesReleased
		s.FencedWrites += x.FencedWrites
		s.AbandonedBatches += x.AbandonedBatches
		s.SettleRetries += x.SettleRetries
		s.Claims += x.Claims
		s.LatePublishes += x.LatePublishes
		s.PoisonRows += x.PoisonRows
		s.WakeupListening = s.WakeupListening && x.WakeupListening
	}
	return s
}

// peakRSS returns VmHWM from /proc/self/status in KiB, or -1.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		var kib int64
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kib); err == nil {
			return kib
		}
	}
	return -1
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// profileEnv names a directory: when set, every child writes a CPU profile of its run
// (from READY to the end: a drain's child idles until GO) there, for finding where a
// relay spends its time.
const profileEnv = "RELAYBENCH_CPUPROFILE"

func startProfile() error {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return nil
	}
	f, err := os.CreateTemp(dir, "relay-*.pprof")
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	return nil
}

// child is a running relay child, seen from the parent.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // READY and RESULT lines; closed at the child's EOF
	waited chan error
}

// startChild starts a relay child and waits until it is ready.
func startChild(ctx context.Context, cfg childConfig) (*child, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 15 * time.Minute
	}
	spec, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode child config: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("child stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("child stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start relay child: %w", err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 4), waited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "READY" || strings.HasPrefix(line, "RESULT ") {
				c.lines <- line
			} else {
				fmt.Fprintln(os.Stderr, "child:", line)
			}
		}
		close(c.lines)
		c.waited <- cmd.Wait()
	}()
	if line, ok := <-c.lines; !ok || line != "READY" {
		return nil, fmt.Errorf("relay child exited before it was ready: %w", <-c.waited)
	}
	return c, nil
}

// send writes one command line to the child.
func (c *child) send(cmd string) error {
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		return fmt.Errorf("send %s to relay child: %w", cmd, err)
	}
	return nil
}

// result waits for the child's result and its exit.
func (c *child) result() (childResult, error) {
	line, ok := <-c.lines
	if !ok {
		return childResult{}, fmt.Errorf("relay child exited without a result: %w", <-c.waited)
	}
	_ = c.stdin.Close()
	var res childResult
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &res); err != nil {
		return childResult{}, fmt.Errorf("decode child result: %w", err)
	}
	if err := <-c.waited; err != nil {
		return childResult{}, fmt.Errorf("relay child: %w", err)
	}
	return res, nil
}

// kill ends a child that is no longer wanted (after an error).
func (c *child) kill() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
}

// runFollowLoopChild runs the plain-SQL follow loop from READY until STOP (or stdin
// closes), then writes its receipts and prints its result.
func runFollowLoopChild(cfg childConfig, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := benchdb.Open(ctx, cfg.DSN, cfg.DB, 2, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	rec := &recordSink{}
	var (
		statements int64
		loopErr    error
		done       = make(chan struct{})
	)
	go func() {
		defer close(done)
		statements, loopErr = followLoop(ctx, pool, cfg.FollowLoop, rec)
	}()
	if err := startProfile(); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	if _, err := fmt.Fprintln(out, "READY"); err != nil {
		return fmt.Errorf("report ready: %w", err)
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() && strings.TrimSpace(sc.Text()) != "STOP" {
	}
	cancel()
	<-done
	if loopErr != nil {
		return loopErr
	}
	if err := rec.writeTo(cfg.Receipts); err != nil {
		return err
	}
	b, err := json.Marshal(childResult{Statements: statements})
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if _, err := fmt.Fprintf(out, "RESULT %s\n", b); err != nil {
		return fmt.Errorf("report result: %w", err)
	}
	return nil
}
