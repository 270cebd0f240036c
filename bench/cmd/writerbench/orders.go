package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
)

// The orders part: what the outbox costs a realistic business transaction, one INSERT of
// a new order, as the peer harness measured it. Each configuration adds one
// write to that transaction: into a plain table, into the seed article's outbox table,
// into outbox.events by hand, or through Enqueue (pgx and database/sql), with and without
// the Notifier after commit.

// ordersSectionTitle is the level-2 heading of the orders part's section.
const ordersSectionTitle = "Writer: an orders transaction"

// ordersClients are the numbers of concurrent clients of the orders part.
var ordersClients = []int{8, 32}

// Targets of issue 16 at 8 clients, in points of cost.
const (
	targetPgxVsArticlePoints = 2.0 // Enqueue(PgxTx) ≤ the seed article's table + 2 points
	targetSQLVsPgxPoints     = 3.0 // Enqueue(SQLTx) ≤ Enqueue(PgxTx) + 3 points
	targetNotifierPoints     = 3.0 // the Notifier ≤ 3%
)

const ordersSchemaSQL = benchdb.OrdersSQL + `
-- The outbox table of the seed article (the usual hand-rolled outbox): a uuid key,
-- the aggregate and the event, a jsonb payload, and a partial index on what is not yet
-- published, which its relay polls in created_at order.
CREATE TABLE IF NOT EXISTS article_outbox (
    id             uuid PRIMARY KEY,
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    event_type     text NOT NULL,
    payload        jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    published_at   timestamptz
);
CREATE INDEX IF NOT EXISTS article_outbox_unpublished ON article_outbox (created_at) WHERE published_at IS NULL;`

const (
	insertOrderSQL   = benchdb.InsertOrderSQL
	insertArticleSQL = `INSERT INTO article_outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4, $5)`
)

type ordersMode int

const (
	ordersBase        ordersMode = iota // the order alone (pgx)
	ordersMinimal                       // + one INSERT into minimal_events
	ordersArticle                       // + one INSERT into the seed article's table
	ordersRaw                           // + one hand-written INSERT into outbox.events
	ordersPgx                           // + Enqueue(PgxTx)
	ordersPgxNotifier                   // + Enqueue(PgxTx), Notifier.AfterCommit after commit
	ordersPgxAgain                      // + Enqueue(PgxTx) again: a control, whose difference from ordersPgx is the noise
	ordersSQLBase                       // the order alone, through database/sql
	ordersSQL                           // + Enqueue(SQLTx)
	ordersSQLNotifier                   // + Enqueue(SQLTx), Notifier.AfterCommit after commit
)

var ordersModes = []ordersMode{ordersBase, ordersMinimal, ordersArticle, ordersRaw, ordersPgx, ordersPgxNotifier, ordersPgxAgain, ordersSQLBase, ordersSQL, ordersSQLNotifier}

func (m ordersMode) String() string {
	return [...]string{
		"order only (pgx)", "+ plain table insert", "+ seed article's table insert", "+ raw outbox.events insert",
		"+ Enqueue(PgxTx)", "+ Enqueue(PgxTx) + Notifier", "+ Enqueue(PgxTx), again (control)", "order only (database/sql)", "+ Enqueue(SQLTx)", "+ Enqueue(SQLTx) + Notifier",
	}[m]
}

func (m ordersMode) databaseSQL() bool { return m >= ordersSQLBase }

// orders is the orders part's state.
type orders struct {
	pool     *pgxpool.Pool
	db       *sql.DB
	notifier *outbox.Notifier
	tps      [][][]float64 // [client count index][mode] per-run tx/s
	cpu      [][][]float64 // [client count index][mode] per-run CPU µs per transaction, client and server
	started  time.Time
	machine  benchreport.Machine
	load     [2]string
	wal      []walRow
}

func runOrders(ctx context.Context, pool *pgxpool.Pool, o options) (string, error) {
	if _, err := pool.Exec(ctx, ordersSchemaSQL); err != nil {
		return "", fmt.Errorf("create orders tables: %w", err)
	}
	db := stdlib.OpenDB(*pool.Config().ConnConfig.Copy())
	defer func() { _ = db.Close() }()
	maxClients := ordersClients[len(ordersClients)-1]
	db.SetMaxOpenConns(maxClients)
	db.SetMaxIdleConns(maxClients)
	stopListen, err := listen(ctx, pool)
	if err != nil {
		return "", err
	}
	defer stopListen()
	n, err := outbox.NewNotifier(pool, nil)
	if err != nil {
		return "", fmt.Errorf("new notifier: %w", err)
	}
	defer n.Close()
	b := &orders{pool: pool, db: db, notifier: n, started: time.Now()}
	b.load[0] = benchreport.LoadAvg()
	if b.machine, err = benchreport.DescribeMachine(ctx, pool); err != nil {
		return "", err
	}
	if b.wal, err = walPerEvent(ctx, pool); err != nil {
		return "", err
	}
	for _, m := range ordersModes { // warm up: every connection, every statement
		if _, err := b.throughput(ctx, m, maxClients, o.duration/5); err != nil {
			return "", fmt.Errorf("warm-up %s: %w", m, err)
		}
	}
	b.tps = make([][][]float64, len(ordersClients))
	b.cpu = make([][][]float64, len(ordersClients))
	for ci := range ordersClients {
		b.tps[ci] = make([][]float64, len(ordersModes))
		b.cpu[ci] = make([][]float64, len(ordersModes))
	}
	for r := range o.runs {
		for ci, clients := range ordersClients {
			for _, m := range ordersModes {
				if err := resetOrders(ctx, pool); err != nil {
					return "", err
				}
				cpu0, err := sampleCPU(ctx, pool)
				if err != nil {
					return "", err
				}
				t0 := time.Now()
				x, err := b.throughput(ctx, m, clients, o.duration)
				if err != nil {
					return "", fmt.Errorf("run %d, %d clients, %s: %w", r+1, clients, m, err)
				}
				txs := x * time.Since(t0).Seconds()
				cpu1, err := sampleCPU(ctx, pool)
				if err != nil {
					return "", err
				}
				perTx := float64(cpu1.since(cpu0).Microseconds()) / txs
				b.tps[ci][m] = append(b.tps[ci][m], x)
				b.cpu[ci][m] = append(b.cpu[ci][m], perTx)
				fmt.Fprintf(os.Stderr, "orders run %d/%d  %2d clients  %-30s %8.0f tx/s %6.0f CPU µs/tx\n", r+1, o.runs, clients, m, x, perTx)
			}
		}
	}
	b.load[1] = benchreport.LoadAvg()
	return b.markdown(o), resetOrders(ctx, pool)
}

func resetOrders(ctx context.Context, pool *pgxpool.Pool) error {
	for _, q := range []string{
		"TRUNCATE orders, article_outbox, outbox.events, minimal_events RESTART IDENTITY",
		"CHECKPOINT",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset: %s: %w", q, err)
		}
	}
	return nil
}

func (b *orders) throughput(ctx context.Context, m ordersMode, clients int, d time.Duration) (float64, error) {
	return benchdb.Throughput(ctx, clients, d, func(ctx context.Context, customer int) error {
		if m.databaseSQL() {
			return b.sqlTx(ctx, m, customer)
		}
		return b.pgxTx(ctx, m, customer)
	})
}

// orderEvent is the event of a new order: aggregate order/<id>, a new aggregate each
// time (so the aggregate lock never waits), the benchmark's 212-byte payload.
func orderEvent(id uuid.UUID) outbox.Event {
	return outbox.Event{AggregateType: "order", AggregateID: id.String(), EventType: "order.placed", Payload: benchdb.Payload}
}

func (b *orders) pgxTx(ctx context.Context, m ordersMode, customer int) error {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op once committed
	id := uuid.Must(uuid.NewV7())
	if _, err := tx.Exec(ctx, insertOrderSQL, [16]byte(id), customer, int64(customer)*100); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	e := orderEvent(id)
	switch m {
	case ordersMinimal:
		_, err = tx.Exec(ctx, benchdb.MinimalInsertSQL, "order/"+e.AggregateID, e.EventType, string(e.Payload))
	case ordersArticle:
		_, err = tx.Exec(ctx, insertArticleSQL, [16]byte(outbox.NewID()), e.AggregateType, e.AggregateID, e.EventType, string(e.Payload))
	case ordersRaw:
		_, err = tx.Exec(ctx, benchdb.RawEventsInsertSQL, [16]byte(outbox.NewID()), e.AggregateType, e.AggregateID, e.EventType, string(e.Payload))
	case ordersPgx, ordersPgxNotifier, ordersPgxAgain:
		err = outbox.Enqueue(ctx, outbox.PgxTx(tx), e)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", m, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if m == ordersPgxNotifier {
		b.notifier.AfterCommit(ctx)
	}
	return nil
}

func (b *orders) sqlTx(ctx context.Context, m ordersMode, customer int) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // no-op once committed
	id := uuid.Must(uuid.NewV7())
	if _, err := tx.ExecContext(ctx, insertOrderSQL, id.String(), customer, int64(customer)*100); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	if m != ordersSQLBase {
		if err := outbox.Enqueue(ctx, outbox.SQLTx(tx), orderEvent(id)); err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if m == ordersSQLNotifier {
		b.notifier.AfterCommit(ctx)
	}
	return nil
}

// listen holds a session that LISTENs on the wake-up channel, as a relay's listener
// would, and drains notifications until the returned function is called.
func listen(ctx context.Context, pool *pgxpool.Pool) (func(), error) {
	conn, err := pool.Acquire(ctx)
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
		_ = conn.Conn().Close(context.Background()) // interrupted mid-wait: do not reuse it
		conn.Release()
	}, nil
}

func (b *orders) markdown(o options) string {
	var s strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&s, format, args...) }
	p("## %s\n\n", ordersSectionTitle)
	p("What the outbox costs a realistic business transaction. Written by `bench/cmd/writerbench -parts orders`; rerun to replace this section.\n\n")
	s.WriteString(benchreport.Preamble("./cmd/writerbench", b.started, b.machine, b.load[0], b.load[1],
		busyNote))
	p("- %d interleaved runs of %s per configuration, medians reported; every configuration of a run back to back, so ratios within a run are the figures to read\n\n", o.runs, o.duration)
	p("Each transaction: `%s` (a new uuid order of a random customer; `orders` has its primary key and an index on `customer_id`) then commit. ", insertOrderSQL)
	p("The configurations add one write of one event for that order (aggregate order/<id>, %d-byte JSON payload): ", len(benchdb.Payload))
	p("into a plain 5-column table (bigserial key, no other index); into the seed article's outbox table (uuid key, jsonb payload, a partial index on unpublished rows); ")
	p("by hand into `outbox.events` (`%s`); or through `outbox.Enqueue`. ", benchdb.RawEventsInsertSQL)
	p("\"+ Notifier\" calls `Notifier.AfterCommit` after the commit (a session LISTENs throughout, as a relay would). ")
	p("The database/sql configurations run through `stdlib.OpenDB` (pgx's database/sql driver) with their own connections; their cost is against the order alone through database/sql. ")
	p("Cost = (order only − x) / order only. Before every measurement the tables are truncated and a checkpoint taken.\n\n")

	p("Cost is computed per run (against the same run's order-only figure, measured seconds before) and the median of the runs is shown, with the lowest and highest run: the machine's load drifts within minutes, and a cost read from two medians taken minutes apart mixes that drift in. ")
	p("\"vs pgx base\" is the database/sql configurations' cost against the order alone through pgx, the way the issue's harness counted it.\n\n")
	p("| clients | configuration | tx/s (median) | cost (median of runs) | cost, lowest–highest run | vs pgx base |\n|---:|---|---:|---:|---:|---:|\n")
	costs := make([]map[ordersMode]float64, len(ordersClients))
	for ci, clients := range ordersClients {
		costs[ci] = map[ordersMode]float64{}
		for _, m := range ordersModes {
			base := ordersBase
			if m.databaseSQL() {
				base = ordersSQLBase
			}
			runs := b.tps[ci][m]
			var per, perPgx []float64
			for r, x := range runs {
				per = append(per, cost(b.tps[ci][base][r], x))
				perPgx = append(perPgx, cost(b.tps[ci][ordersBase][r], x))
			}
			costs[ci][m] = benchreport.Median(per)
			vsPgx := "—"
			if m.databaseSQL() {
				vsPgx = fmt.Sprintf("%.1f%%", benchreport.Median(perPgx))
			}
			p("| %d | %s | %.0f | %.1f%% | %.1f … %.1f%% | %s |\n", clients, m, benchreport.Median(runs), costs[ci][m], slices.Min(per), slices.Max(per), vsPgx)
		}
	}
	p("\n")
	s.WriteString(walMarkdown(b.wal))
	p("\n### CPU per transaction\n\n")
	p("CPU time of the benchmark process and of every backend of its database (from `/proc/<pid>/stat`, 10 ms ticks) divided by the transactions committed: ")
	p("unlike throughput, it hardly depends on how many other processes share the two cores, so it is the steadier figure on a loaded machine; it does not count waits (WAL flushes, locks). ")
	p("Extra = this configuration's CPU per transaction minus the order alone's (through the same driver), per run, median.\n\n")
	p("| clients | configuration | CPU µs/tx (median) | extra µs/tx (median of runs) | extra, lowest–highest run |\n|---:|---|---:|---:|---:|\n")
	cpuExtra := make([]map[ordersMode]float64, len(ordersClients))
	for ci, clients := range ordersClients {
		cpuExtra[ci] = map[ordersMode]float64{}
		for _, m := range ordersModes {
			base := ordersBase
			if m.databaseSQL() {
				base = ordersSQLBase
			}
			var extra []float64
			for r, x := range b.cpu[ci][m] {
				extra = append(extra, x-b.cpu[ci][base][r])
			}
			cpuExtra[ci][m] = benchreport.Median(extra)
			p("| %d | %s | %.0f | %+.0f | %+.0f … %+.0f |\n", clients, m, benchreport.Median(b.cpu[ci][m]), cpuExtra[ci][m], slices.Min(extra), slices.Max(extra))
		}
	}

	p("\n### Targets (this run)\n\n")
	for ci, clients := range ordersClients {
		c := costs[ci]
		p("At %d clients:\n\n", clients)
		p("- `Enqueue(PgxTx)` ≤ the seed article's table + %.0f points: %s — %.1f%% vs %.1f%% (%+.1f points; the hand-written insert into `outbox.events`: %.1f%%, the plain table: %.1f%%).\n",
			targetPgxVsArticlePoints, benchreport.Met(c[ordersPgx]-c[ordersArticle] <= targetPgxVsArticlePoints), c[ordersPgx], c[ordersArticle], c[ordersPgx]-c[ordersArticle], c[ordersRaw], c[ordersMinimal])
		p("- `Enqueue(SQLTx)` ≤ `Enqueue(PgxTx)` + %.0f points: %s — %.1f%% vs %.1f%% (%+.1f points).\n",
			targetSQLVsPgxPoints, benchreport.Met(c[ordersSQL]-c[ordersPgx] <= targetSQLVsPgxPoints), c[ordersSQL], c[ordersPgx], c[ordersSQL]-c[ordersPgx])
		p("- Notifier ≤ %.0f%%: %s — %+.1f points through pgx, %+.1f through database/sql.\n",
			targetNotifierPoints, benchreport.Met(c[ordersPgxNotifier]-c[ordersPgx] <= targetNotifierPoints && c[ordersSQLNotifier]-c[ordersSQL] <= targetNotifierPoints),
			c[ordersPgxNotifier]-c[ordersPgx], c[ordersSQLNotifier]-c[ordersSQL])
		p("- Noise: the control, the same `Enqueue(PgxTx)` configuration measured twice in each run, differs by %+.1f points (cost) and %+.0f µs/tx (CPU); a difference smaller than that is not resolved by this run.\n\n",
			c[ordersPgxAgain]-c[ordersPgx], cpuExtra[ci][ordersPgxAgain]-cpuExtra[ci][ordersPgx])
	}
	p("(The issue's targets are set at %d clients; %d clients are shown for the trend.)\n\n", targetClients, ordersClients[len(ordersClients)-1])

	p("### Every run (tx/s)\n\n| clients | configuration | runs | spread (max/min) |\n|---:|---|---|---:|\n")
	for ci, clients := range ordersClients {
		for _, m := range ordersModes {
			runs := b.tps[ci][m]
			var txt []string
			lo, hi := runs[0], runs[0]
			for _, x := range runs {
				txt = append(txt, strconv.FormatFloat(x, 'f', 0, 64))
				lo, hi = min(lo, x), max(hi, x)
			}
			p("| %d | %s | %s | %.2f× |\n", clients, m, strings.Join(txt, ", "), hi/lo)
		}
	}
	return s.String()
}
