// Command sinkbench measures the broker sinks: how fast the relay drains a backlog
// through each one, as a share of a plain loop draining the same backlog into the same
// broker — one transaction claims a batch of rows (UPDATE … RETURNING, as the
// plain-SQL limit of relaybench), publishes them with the broker client's own async
// API and waits for the acks, then commits. The in-memory sink's drain runs in the same
// run: the relay through it against a plain loop publishing nowhere is the relay's own
// share, which bounds every sink's.
//
// Kafka is franz-go's in-process kfake cluster (there is no Kafka broker on the build
// machines); NATS is the server at -nats (JetStream, file storage), RabbitMQ the one
// at -amqp and Redis the one at -redis, each on a stream or exchange and queue of its
// own, removed afterwards; webhooks go to a net/http endpoint in this process, and SQS
// to goaws v0.5.4 in this process. redis-dedup is the Redis sink with Dedup (its Lua
// script) against the same plain XADD loop: its ratio to redis's is the script's cost. With
// -out, the tables are written to the "Sinks" section of that file (replaced or
// appended; other sections are kept).
//
// Usage (from bench/):
//
//	go run ./cmd/sinkbench -out RESULTS.md
//	go run ./cmd/sinkbench -events 20000 -brokers nats
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
	"github.com/outboxkit/outbox/relay"
)

// target is the goal: the relay through a sink drains at least this share of
// the plain loop into the same broker.
const target = 0.90

type options struct {
	dsn, database, out, natsURL, amqpURL, redisAddr string
	events, aggregates, batch, rounds               int
	brokers                                         []string
}

func main() {
	var o options
	var brokers string
	flag.StringVar(&o.dsn, "dsn", benchdb.DefaultDSN, "PostgreSQL server to create the benchmark database on")
	flag.StringVar(&o.database, "database", "outbox_sinkbench", "database to (re)create")
	flag.StringVar(&o.out, "out", "", `markdown file whose "Sinks" section receives the results`)
	flag.StringVar(&o.natsURL, "nats", "nats://127.0.0.1:4222", "NATS server with JetStream")
	flag.StringVar(&o.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ server")
	flag.StringVar(&o.redisAddr, "redis", "127.0.0.1:6379", "Redis server")
	flag.IntVar(&o.events, "events", 100_000, "events per drain")
	flag.IntVar(&o.aggregates, "aggregates", 1000, "aggregates the events are spread over")
	flag.IntVar(&o.batch, "batch", 100, "relay BatchSize, and rows per plain-loop transaction")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds; each measures every loop and sink again, and the table shows medians")
	flag.StringVar(&brokers, "brokers", "kafka,nats,amqp,http,redis,redis-dedup,sqs", "brokers to measure, comma-separated")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	o.brokers = strings.Split(brokers, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "sinkbench:", err)
		os.Exit(1)
	}
}

// workers is the number of plain loops at once: the relay's default Concurrency for a
// lone unordered relay.
const workers = 2

func run(ctx context.Context, o options) error {
	started := time.Now()
	loadStart := benchreport.LoadAvg()
	pool, err := benchdb.Setup(ctx, o.dsn, o.database, 16)
	if err != nil {
		return err
	}
	defer pool.Close()
	machine, err := benchreport.DescribeMachine(ctx, pool)
	if err != nil {
		return err
	}
	b := &bench{o: o, pool: pool}
	loopEPS := map[string][]float64{}
	sinkEPS := map[string][]float64{}
	for round := 1; round <= o.rounds; round++ {
		for _, name := range append([]string{memory}, o.brokers...) {
			br, err := newBroker(ctx, name, o)
			if err != nil {
				return err
			}
			loop, sink, err := b.measure(ctx, br, round%2 == 0)
			br.close()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			loopEPS[name] = append(loopEPS[name], loop)
			sinkEPS[name] = append(sinkEPS[name], sink)
			fmt.Printf("round %d: %s plain loop %.0f events/s, relay + sink %.0f events/s (%.2f)\n", round, name, loop, sink, sink/loop)
		}
	}
	report := b.report(started, machine, loadStart, benchreport.LoadAvg(), loopEPS, sinkEPS)
	fmt.Print(report)
	if o.out != "" {
		return benchreport.WriteSection(o.out, "Sinks", report)
	}
	return nil
}

// bench holds what every measurement needs.
type bench struct {
	o    options
	pool *pgxpool.Pool
}

func (b *bench) eps(d time.Duration) float64 { return float64(b.o.events) / d.Seconds() }

// measure drains the backlog once with the plain loop, once with the relay through the
// broker's sink (relayFirst: in that order; rounds alternate it, so neither always
// meets the machine's later state), and returns both rates.
func (b *bench) measure(ctx context.Context, br *broker, relayFirst bool) (loop, sink float64, err error) {
	drainLoop := func() error {
		d, err := b.drainLoop(ctx, br.plain)
		if err != nil {
			return fmt.Errorf("plain loop: %w", err)
		}
		loop = b.eps(d)
		return nil
	}
	drainRelay := func() error {
		d, err := b.drainRelay(ctx, br.sink)
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		sink = b.eps(d)
		return nil
	}
	order := []func() error{drainLoop, drainRelay}
	if relayFirst {
		order[0], order[1] = order[1], order[0]
	}
	for _, drain := range order {
		// each drain into an empty destination: a queue already holding the other's
		// 100,000 messages is slower to write to
		if br.empty != nil {
			if err := br.empty(ctx); err != nil {
				return 0, 0, fmt.Errorf("empty the destination: %w", err)
			}
		}
		if err := drain(); err != nil {
			return 0, 0, err
		}
	}
	return loop, sink, nil
}

// fresh starts a measurement on a new backlog.
func (b *bench) fresh(ctx context.Context) error {
	if err := benchdb.ResetOutbox(ctx, b.pool); err != nil {
		return err
	}
	if err := benchdb.Fill(ctx, b.pool, b.o.events, b.o.aggregates, false); err != nil {
		return err
	}
	return benchdb.Settle(ctx, b.pool)
}

// drainRelay drains a fresh backlog with one unordered relay (default Concurrency)
// through sink and returns how long it took.
func (b *bench) drainRelay(ctx context.Context, sink outbox.Sink) (time.Duration, error) {
	if err := b.fresh(ctx); err != nil {
		return 0, err
	}
	r, err := relay.New(b.pool, sink, &relay.Config{Mode: relay.Unordered, BatchSize: b.o.batch, Wakeup: relay.WakeupPoll, PollInterval: 10 * time.Millisecond})
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(rctx) }()
	elapsed, werr := b.waitDrained(ctx, start, done)
	cancel()
	if err := <-done; err != nil && werr == nil {
		werr = err
	}
	if werr != nil {
		return 0, werr
	}
	if st := r.Stats(); st.Dead > 0 || st.Retried > 0 {
		return 0, fmt.Errorf("the relay retried %d events and lost %d to dead letters: not a clean drain", st.Retried, st.Dead)
	}
	return elapsed, nil
}

// waitDrained polls until no event is pending and returns the time since start. No
// row below a pending one becomes pending again in these drains (a rolled-back or
// refused claim leaves its rows as they were, and the relay must retry none), so each
// check starts from the lowest pending row the last one found.
func (b *bench) waitDrained(ctx context.Context, start time.Time, done <-chan error) (time.Duration, error) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var lowest int64 // no pending row is below it
	for {
		var next *int64
		if err := b.pool.QueryRow(ctx, lowestPendingSQL, lowest).Scan(&next); err != nil {
			return 0, err
		}
		if next == nil {
			return time.Since(start), nil
		}
		lowest = *next
		select {
		case <-tick.C:
		case err := <-done:
			return 0, fmt.Errorf("relay stopped with seq %d pending: %w", lowest, err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// lowestPendingSQL is the lowest pending seq at or above $1 (null: none): a walk of
// events_pending from where the last check stopped, a few index pages. A count(*) of
// the pending rows instead took 7-12 ms every 5 ms, half a core of the two taken
// from the relay while the plain loop, which ends by itself, paid nothing.
const lowestPendingSQL = `SELECT min(seq) FROM outbox.events
	WHERE published_at IS NULL AND dead_at IS NULL AND available_at IS NOT NULL AND seq >= $1`

// claimSQL claims the oldest available rows and marks them published, returning what
// a publisher needs to write the message the sinks write.
const claimSQL = `UPDATE outbox.events SET published_at = now() WHERE seq IN (
	SELECT seq FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now()
	ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, aggregate_type, aggregate_id, coalesce(aggregate_version, 0), event_type, schema_version,
	content_type, created_at, coalesce(convert_to(payload::text, 'UTF8'), payload_bytes)`

// row is one claimed event, as the plain loop publishes it.
type row struct {
	m outbox.Message
}

// drainLoop drains a fresh backlog with workers plain loops: claim a batch in a
// transaction, publish it with publish (which waits for the broker's acks), commit.
func (b *bench) drainLoop(ctx context.Context, publish func(context.Context, []row) error) (time.Duration, error) {
	if err := b.fresh(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	errs := make(chan error, workers)
	for range workers {
		go func() { errs <- b.loop(ctx, publish) }()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(start), first
}

func (b *bench) loop(ctx context.Context, publish func(context.Context, []row) error) error {
	for {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, claimSQL, b.o.batch)
		if err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		var batch []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.m.ID, &r.m.AggregateType, &r.m.AggregateID, &r.m.AggregateVersion, &r.m.EventType,
				&r.m.SchemaVersion, &r.m.ContentType, &r.m.CreatedAt, &r.m.Payload); err != nil {
				rows.Close()
				_ = tx.Rollback(ctx)
				return err
			}
			batch = append(batch, r)
		}
		if err := rows.Err(); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if len(batch) == 0 {
			return tx.Rollback(ctx)
		}
		if err := publish(ctx, batch); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
}

func (b *bench) report(started time.Time, m benchreport.Machine, loadStart, loadEnd string, loopEPS, sinkEPS map[string][]float64) string {
	var s strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&s, format, args...) }
	p("## Sinks\n\n")
	p("%s", benchreport.Preamble("./cmd/sinkbench", started, m, loadStart, loadEnd, "the figures are low and noisy"))
	p("- Drain of %d events over %d aggregates, %d round(s) (medians); one unordered relay, BatchSize %d, default Concurrency (2); "+
		"the plain loop: %d loops of one transaction each claiming %d rows (UPDATE … RETURNING), publishing them with the client's async API as the same messages (key, headers and properties of docs/message-format.md) and waiting for every ack, then committing\n",
		b.o.events, b.o.aggregates, b.o.rounds, b.o.batch, workers, b.o.batch)
	p("- Brokers: Kafka is franz-go's in-process kfake (1 broker, 3 partitions); NATS %s (JetStream, file storage, R1); RabbitMQ %s (durable topic exchange and classic queue, persistent messages, confirms); "+
		"`memory` is the relay through memsink against the plain loop publishing nowhere: the relay's own share of a plain loop, which bounds every sink's\n", redact(b.o.natsURL), redact(b.o.amqpURL))
	p("- Webhooks: a net/http endpoint in the process on loopback (plain HTTP, answering 204); the plain loop POSTs the same signed requests, %d at once (httpsink's default MaxConnsPerHost). "+
		"Redis %s (7.0, no AOF): the plain loop pipelines one XADD per row; `redis-dedup` is the sink with Dedup (a Lua script per add and a key per event) against that same loop. "+
		"SQS: goaws v0.5.4 in the process (an emulator, not AWS: only the client side is real), one SendMessage per message, %d at once on both sides (the sink Unbatched: goaws's SendMessageBatch answer is not in the shape the SDK reads)\n\n", inFlight, b.o.redisAddr, inFlight)
	p("| broker | plain loop events/s | relay + sink events/s | ratio (target ≥ %.2f) | ratio / memory's ratio |\n|---|---|---|---|---|\n", target)
	memRatio := benchreport.Median(sinkEPS[memory]) / benchreport.Median(loopEPS[memory])
	for _, name := range append([]string{memory}, b.o.brokers...) {
		loop, sink := benchreport.Median(loopEPS[name]), benchreport.Median(sinkEPS[name])
		met := benchreport.Met(sink/loop >= target)
		if name == memory {
			met = "(the relay's bound)"
		}
		p("| %s | %.0f (%s) | %.0f (%s) | %.2f %s | %.2f |\n", name, loop, joinFloats(loopEPS[name]), sink, joinFloats(sinkEPS[name]),
			sink/loop, met, sink/loop/memRatio)
	}
	if plain, dedup := benchreport.Median(sinkEPS["redis"]), benchreport.Median(sinkEPS[redisDedup]); plain > 0 && dedup > 0 {
		p("\nRedis Dedup (Lua script): the relay + sink drains at %.2f of its rate without Dedup (%.0f vs %.0f events/s), each add keeping a key for DedupWindow.\n", dedup/plain, dedup, plain)
	}
	return s.String()
}

func joinFloats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

// redact drops a URL's password.
func redact(u string) string {
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
			return u[:scheme+3] + "…" + u[at:]
		}
	}
	return u
}
