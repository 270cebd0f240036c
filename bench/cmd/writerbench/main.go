// Command writerbench measures what outbox.Enqueue costs a writer's throughput.
//
// Against a PostgreSQL server it creates a database of its own (dropped and recreated
// at start), migrates it with outboxmigrate and measures, at 1, 8 and 32 concurrent
// clients, the throughput of a business transaction (one UPDATE of a random account)
// alone, with one INSERT into a minimal events table, with one hand-written INSERT into
// the outbox's own events table (the floor of its schema), and with one outbox.Enqueue.
// It also compares one Enqueue call of 100 events with 100 calls of one event each.
// Every configuration runs interleaved with the others -runs times; the medians are
// printed and written to the "Writer" section of the -out file.
//
// The orders part (-parts orders) measures, at 8 and 32 clients, a business transaction
// that INSERTs a new order, alone and with one more write of its event: into a plain
// table, into the seed article's outbox table, by hand into outbox.events, through
// Enqueue(PgxTx) and Enqueue(SQLTx), each Enqueue also with the Notifier after commit.
// Its section is "Writer: an orders transaction".
//
// Usage (from bench/):
//
//	go run ./cmd/writerbench -out RESULTS.md
//	go run ./cmd/writerbench -parts orders -runs 5 -duration 5s -out RESULTS.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
)

// clientCounts are the numbers of concurrent clients measured.
var clientCounts = []int{1, 8, 32}

// batchSize is the number of events per transaction in the batch comparison.
const batchSize = 100

type mode int

const (
	modeBase        mode = iota // the business transaction alone
	modeMinimal                 // plus one INSERT into minimal_events
	modeRaw                     // plus one hand-written INSERT into outbox.events
	modeOutbox                  // plus one outbox.Enqueue
	modeOutboxJSONB             // plus one outbox.Enqueue into a schema whose payload column is jsonb
)

var modes = []mode{modeBase, modeMinimal, modeRaw, modeOutbox, modeOutboxJSONB}

func (m mode) String() string {
	return [...]string{"business only", "+ minimal insert", "+ raw events insert", "+ outbox.Enqueue", "+ outbox.Enqueue (jsonb payload)"}[m]
}

// jsonbWriter enqueues into benchdb.JSONBSchema, whose payload column was altered back
// to jsonb: what keeping the payload as written (json, the default) saves or costs.
var jsonbWriter = func() *outbox.Writer {
	w, err := outbox.NewWriter(&outbox.WriterConfig{Schema: benchdb.JSONBSchema})
	if err != nil {
		panic(err)
	}
	return w
}()

type options struct {
	dsn      string
	database string
	out      string
	duration time.Duration
	runs     int
	parts    string
}

func main() {
	var o options
	flag.StringVar(&o.dsn, "dsn", benchdb.DefaultDSN, "PostgreSQL server to benchmark (any database; the benchmark creates its own)")
	flag.StringVar(&o.database, "db", "outbox_writerbench", "database to drop, create and benchmark in")
	flag.StringVar(&o.out, "out", "", `file whose "Writer" section receives the results (replaced or appended); empty: stdout only`)
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "length of one throughput or batch measurement")
	flag.IntVar(&o.runs, "runs", 5, "interleaved runs of every configuration; the median is reported")
	flag.StringVar(&o.parts, "parts", "accounts,orders", `comma-separated parts to run: "accounts" (the account UPDATE transaction, section "Writer"), "orders" (an orders INSERT transaction: plain and seed-article tables, Enqueue through pgx and database/sql, the Notifier; section "`+ordersSectionTitle+`")`)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "writerbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.runs < 1 || o.duration <= 0 {
		return errors.New("-runs must be at least 1 and -duration positive")
	}
	parts := map[string]bool{}
	for p := range strings.SplitSeq(o.parts, ",") {
		if p != "accounts" && p != "orders" {
			return fmt.Errorf("-parts: unknown part %q (accounts, orders)", p)
		}
		parts[p] = true
	}
	maxClients := max(slices.Max(clientCounts), slices.Max(ordersClients))
	// Two more connections than clients: the orders part's LISTEN session and Notifier.
	pool, err := benchdb.Setup(ctx, o.dsn, o.database, int32(maxClients)+2) //nolint:gosec // small
	if err != nil {
		return err
	}
	defer pool.Close()
	if parts["accounts"] {
		if err := runAccounts(ctx, pool, o); err != nil {
			return err
		}
	}
	if parts["orders"] {
		section, err := runOrders(ctx, pool, o)
		if err != nil {
			return err
		}
		fmt.Print(section)
		if o.out != "" {
			if err := benchreport.WriteSection(o.out, ordersSectionTitle, section); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "wrote section %q of %s\n", ordersSectionTitle, o.out)
		}
	}
	return nil
}

// runAccounts is the accounts part: the account UPDATE transaction at 1, 8 and 32
// clients, and the batch comparison.
func runAccounts(ctx context.Context, pool *pgxpool.Pool, o options) error {
	maxClients := slices.Max(clientCounts)
	var err error

	rep := report{started: time.Now(), opts: o, loadStart: benchreport.LoadAvg()}
	if rep.machine, err = benchreport.DescribeMachine(ctx, pool); err != nil {
		return err
	}

	// Warm up: open every connection and prepare every statement on it.
	for _, m := range modes {
		if _, err := throughput(ctx, pool, m, maxClients, o.duration/5); err != nil {
			return fmt.Errorf("warm-up %s: %w", m, err)
		}
	}

	rep.tps = make([][][]float64, len(clientCounts))
	for ci := range clientCounts {
		rep.tps[ci] = make([][]float64, len(modes))
	}
	rep.batch = make([][]batchResult, 2)
	for r := range o.runs {
		for ci, clients := range clientCounts {
			for _, m := range modes {
				if err := benchdb.Reset(ctx, pool); err != nil {
					return err
				}
				tps, err := throughput(ctx, pool, m, clients, o.duration)
				if err != nil {
					return fmt.Errorf("run %d, %d clients, %s: %w", r+1, clients, m, err)
				}
				rep.tps[ci][m] = append(rep.tps[ci][m], tps)
				fmt.Fprintf(os.Stderr, "run %d/%d  %2d clients  %-17s %8.0f tx/s\n", r+1, o.runs, clients, m, tps)
			}
		}
		for i, single := range []bool{false, true} {
			if err := benchdb.Reset(ctx, pool); err != nil {
				return err
			}
			res, err := batchRun(ctx, pool, single, o.duration)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r+1, batchName(single), err)
			}
			rep.batch[i] = append(rep.batch[i], res)
			fmt.Fprintf(os.Stderr, "run %d/%d  %-10s %8.1f µs/event in Enqueue, %8.1f µs/event per transaction\n",
				r+1, o.runs, batchName(single), micros(res.enqueuePerEvent()), micros(res.txPerEvent()))
		}
	}
	rep.loadEnd = benchreport.LoadAvg()
	if err := benchdb.Reset(ctx, pool); err != nil {
		return err
	}

	section := rep.markdown()
	fmt.Print(section)
	if o.out != "" {
		if err := benchreport.WriteSection(o.out, sectionTitle, section); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote section %q of %s\n", sectionTitle, o.out)
	}
	return nil
}

// throughput runs business transactions of mode m from clients goroutines for d and
// returns the committed transactions per second.
func throughput(ctx context.Context, pool *pgxpool.Pool, m mode, clients int, d time.Duration) (float64, error) {
	return benchdb.Throughput(ctx, clients, d, func(ctx context.Context, id int) error { return businessTx(ctx, pool, m, id) })
}

func businessTx(ctx context.Context, pool *pgxpool.Pool, m mode, id int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op once committed
	if _, err := tx.Exec(ctx, benchdb.UpdateSQL, id); err != nil {
		return fmt.Errorf("update account %d: %w", id, err)
	}
	switch m {
	case modeBase:
	case modeMinimal:
		if _, err := tx.Exec(ctx, benchdb.MinimalInsertSQL, "account/"+strconv.Itoa(id), "account.credited", benchdb.Payload); err != nil {
			return fmt.Errorf("insert minimal event: %w", err)
		}
	case modeRaw:
		e := benchdb.Event(id)
		if _, err := tx.Exec(ctx, benchdb.RawEventsInsertSQL, [16]byte(outbox.NewID()), e.AggregateType, e.AggregateID, e.EventType, string(e.Payload)); err != nil {
			return fmt.Errorf("insert raw event: %w", err)
		}
	case modeOutbox:
		if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), benchdb.Event(id)); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
	case modeOutboxJSONB:
		if err := jsonbWriter.Enqueue(ctx, outbox.PgxTx(tx), benchdb.Event(id)); err != nil {
			return fmt.Errorf("enqueue (jsonb): %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// batchResult is one batch-comparison measurement.
type batchResult struct {
	events  int
	enqueue time.Duration // spent in Enqueue calls
	tx      time.Duration // spent in whole transactions: begin, Enqueue calls, commit
}

func (b batchResult) enqueuePerEvent() time.Duration { return b.enqueue / time.Duration(b.events) }
func (b batchResult) txPerEvent() time.Duration      { return b.tx / time.Duration(b.events) }

func batchName(single bool) string {
	if single {
		return "single" + strconv.Itoa(batchSize)
	}
	return "batch" + strconv.Itoa(batchSize)
}

// batchRun writes transactions of batchSize events (for distinct accounts) from one
// client for d: in one Enqueue call, or in batchSize calls of one event when single.
func batchRun(ctx context.Context, pool *pgxpool.Pool, single bool, d time.Duration) (batchResult, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return batchResult{}, fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0)) //nolint:gosec // load generation, not security
	var res batchResult
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		events := benchdb.Batch(1+rng.IntN(benchdb.Accounts), batchSize)
		t0 := time.Now()
		tx, err := conn.Begin(ctx)
		if err != nil {
			return batchResult{}, fmt.Errorf("begin: %w", err)
		}
		t1 := time.Now()
		if single {
			for _, e := range events {
				if err = outbox.Enqueue(ctx, outbox.PgxTx(tx), e); err != nil {
					break
				}
			}
		} else {
			err = outbox.Enqueue(ctx, outbox.PgxTx(tx), events...)
		}
		res.enqueue += time.Since(t1)
		if err != nil {
			_ = tx.Rollback(ctx)
			return batchResult{}, fmt.Errorf("enqueue: %w", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return batchResult{}, fmt.Errorf("commit: %w", err)
		}
		res.tx += time.Since(t0)
		res.events += len(events)
	}
	return res, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
