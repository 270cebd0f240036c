package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
	"github.com/outboxkit/outbox/relay"
)

// targetNotifierCost is the most throughput the default wake-up path may cost writers.
const targetNotifierCost = 5.0 // percent

// writerPath is one wake-up path of the writer part.
type writerPath int

const (
	writerNone     writerPath = iota // no wake-up
	writerNotifier                   // outbox.Notifier.AfterCommit after commit
	writerTrigger                    // the NOTIFY trigger installed
)

var writerPaths = []writerPath{writerNone, writerNotifier, writerTrigger}

func (w writerPath) String() string {
	return [...]string{"no wake-up", "Notifier after commit (default)", "NOTIFY trigger"}[w]
}

func (b *bench) writer(ctx context.Context) (partReport, error) {
	if err := benchdb.ResetOutbox(ctx, b.pool); err != nil {
		return partReport{}, err
	}
	// A session LISTENing on the wake-up channel, as a relay's listener would be: it
	// consumes the notifications, so the server's notification queue does not grow.
	stopListen, err := b.listen(ctx)
	if err != nil {
		return partReport{}, err
	}
	defer stopListen()
	n, err := outbox.NewNotifier(b.pool, nil)
	if err != nil {
		return partReport{}, fmt.Errorf("new notifier: %w", err)
	}
	defer n.Close()

	tps := make([][]float64, len(writerPaths))
	for r := range b.o.writerRuns + 1 { // run 0 warms up and is not counted
		for _, path := range writerPaths {
			x, err := b.writerRun(ctx, path, n, r == 0)
			if err != nil {
				return partReport{}, fmt.Errorf("run %d, %s: %w", r, path, err)
			}
			if r > 0 {
				tps[path] = append(tps[path], x)
				fmt.Fprintf(os.Stderr, "writer run %d/%d %-32s %8.0f tx/s\n", r, b.o.writerRuns, path, x)
			}
		}
	}

	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Writer throughput per wake-up path\n\n")
	p("%d clients run the writer benchmark's business transaction (`UPDATE accounts` of a random account + one `outbox.Enqueue`, through `outbox.WithTx`) for %s, ", b.o.writerClients, b.o.writerDuration)
	p("with no wake-up, with `Notifier.AfterCommit` passed to WithTx (the default path), or with the NOTIFY trigger installed; %d interleaved runs each, medians reported, ", b.o.writerRuns)
	p("after one unreported warm-up round. A session LISTENs on the wake-up channel throughout (no relay runs). Before every run the event tables are truncated, `accounts` vacuumed and a checkpoint taken.\n\n")
	p("| wake-up path | tx/s (median) | cost vs no wake-up | runs |\n|---|---:|---:|---|\n")
	base := benchreport.Median(tps[writerNone])
	var targets []string
	for _, path := range writerPaths {
		m := benchreport.Median(tps[path])
		var runs []string
		for _, x := range tps[path] {
			runs = append(runs, fmt.Sprintf("%.0f", x))
		}
		c := (base - m) / base * 100
		p("| %s | %.0f | %.1f%% | %s |\n", path, m, c, strings.Join(runs, ", "))
		if path == writerNotifier {
			targets = append(targets, fmt.Sprintf("Writer, default wake-up path (Notifier) costs ≤ %.0f%% at %d clients: %s — %.1f%%.",
				targetNotifierCost, b.o.writerClients, benchreport.Met(c <= targetNotifierCost), c))
		}
	}
	return partReport{md: md.String(), targets: targets}, nil
}

// listen holds a session that LISTENs on the wake-up channel and drains notifications
// until the returned function is called.
func (b *bench) listen(ctx context.Context) (func(), error) {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire listener connection: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{outbox.WakeupChannel("outbox")}.Sanitize()); err != nil {
		conn.Release()
		return nil, fmt.Errorf("listen: %w", err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := conn.Conn().WaitForNotification(lctx); err != nil {
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
		// The connection was interrupted mid-wait: close it rather than reuse it.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}, nil
}

// writerRun measures the business transaction's throughput on one wake-up path.
func (b *bench) writerRun(ctx context.Context, path writerPath, n *outbox.Notifier, warmUp bool) (float64, error) {
	if err := benchdb.Reset(ctx, b.pool); err != nil {
		return 0, err
	}
	if path == writerTrigger {
		if err := relay.InstallNotifyTrigger(ctx, b.pool, ""); err != nil {
			return 0, err
		}
		defer func() { _ = relay.UninstallNotifyTrigger(context.WithoutCancel(ctx), b.pool, "") }()
	}
	var hooks []outbox.AfterCommitFunc
	if path == writerNotifier {
		hooks = append(hooks, n.AfterCommit)
	}
	d := b.o.writerDuration
	if warmUp {
		d /= 5
	}
	return benchdb.Throughput(ctx, b.o.writerClients, d, func(ctx context.Context, id int) error {
		return outbox.WithTx(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, benchdb.UpdateSQL, id); err != nil {
				return fmt.Errorf("update account %d: %w", id, err)
			}
			return outbox.Enqueue(ctx, outbox.PgxTx(tx), benchdb.Event(id))
		}, hooks...)
	})
}
