package main

// The consuming side of the peers part's real peers, in a child process like the
// relay's: the watermill-sql forwarder and a River client with a worker. Protocol: the
// child prints "READY" once one warm-up message has gone end to end; the parent sends
// "EXPECT n" after the producer is done (the child waits until n distinct events have
// arrived, or 2 minutes) or "STOP"; the child writes its receipts, prints
// "RESULT <json>" and exits.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxkit/outbox/bench/internal/benchdb"
)

// Peers the peers part runs besides the relay and the plain-SQL follow loop.
const (
	peerWatermill = "watermill" // watermill-sql's PostgreSQL Pub/Sub + components/forwarder
	peerRiver     = "river"     // River: a job per event, a worker records it
)

const (
	// watermillSchema and riverSchema hold each peer's own tables, apart from outbox.*.
	watermillSchema = "watermill"
	riverSchema     = "river"
	// watermillForwarderTopic is the SQL topic the producer publishes its envelopes to
	// and the forwarder subscribes to; watermillDestTopic is the destination topic named
	// in each envelope (the in-process publisher's).
	watermillForwarderTopic = "events_to_forward"
	watermillDestTopic      = "orders"
	// riverMaxWorkers is the default queue's MaxWorkers, as River's examples configure it.
	riverMaxWorkers = 100
	// peerPoolConns is each peer child's pool size (the relay child's, too).
	peerPoolConns = 8
	// warmupID marks the warm-up message of a peer child; it is not recorded.
	warmupID = "00000000-0000-0000-0000-000000000000"
)

// watermillSchemaAdapter is watermill-sql's standard PostgreSQL schema adapter, its
// tables in watermillSchema. Everything else is the adapter's default (JSON payload,
// SubscribeBatchSize 100, schema initialized in a transaction).
func watermillSchemaAdapter() wmsql.DefaultPostgreSQLSchema {
	return wmsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: func(topic string) string {
			return pgx.Identifier{watermillSchema, "watermill_" + topic}.Sanitize()
		},
	}
}

// watermillOffsetsAdapter is watermill-sql's standard PostgreSQL offsets adapter, its
// table in watermillSchema.
func watermillOffsetsAdapter() wmsql.DefaultPostgreSQLOffsetsAdapter {
	return wmsql.DefaultPostgreSQLOffsetsAdapter{
		GenerateMessagesOffsetsTableName: func(topic string) string {
			return pgx.Identifier{watermillSchema, "watermill_offsets_" + topic}.Sanitize()
		},
	}
}

// benchJobArgs is the River job of one event: its id, aggregate and payload (the same
// bytes the other peers carry).
type benchJobArgs struct {
	EventID     string          `json:"event_id"`
	AggregateID string          `json:"aggregate_id"`
	Payload     json.RawMessage `json:"payload"`
}

// Kind is the River job kind.
func (benchJobArgs) Kind() string { return "relaybench_event" }

// riverConfig is the River client configuration both sides use: schema riverSchema,
// fetch (> 0) as FetchCooldown and FetchPollInterval, River's defaults otherwise (the
// producer's insert-only client needs the same FetchCooldown: it limits how often an
// insert NOTIFYs the workers by it).
func riverConfig(fetch time.Duration, log *slog.Logger) *river.Config {
	return &river.Config{Schema: riverSchema, FetchCooldown: fetch, FetchPollInterval: fetch, Logger: log}
}

// recordingWorker is the River worker: it records when each job reached it.
type recordingWorker struct {
	river.WorkerDefaults[benchJobArgs]
	rec *peerRecorder
}

// Work records the job's event as arrived now.
func (w *recordingWorker) Work(_ context.Context, job *river.Job[benchJobArgs]) error {
	w.rec.arrived(job.Args.EventID, time.Now().UnixNano())
	return nil
}

// recordingPublisher is the forwarder's output publisher: it records when each
// forwarded message reached it (the moment the forwarder hands it to its broker).
type recordingPublisher struct{ rec *peerRecorder }

// Publish records msgs as arrived now.
func (p recordingPublisher) Publish(_ string, msgs ...*message.Message) error {
	at := time.Now().UnixNano()
	for _, m := range msgs {
		p.rec.arrived(m.UUID, at)
	}
	return nil
}

// Close does nothing.
func (recordingPublisher) Close() error { return nil }

// peerRecorder collects a peer child's receipts and signals the warm-up's arrival.
type peerRecorder struct {
	sink     recordSink
	mu       sync.Mutex
	distinct map[uuid.UUID]struct{}
	bad      int
	warm     chan struct{}
	warmOnce sync.Once
}

func newPeerRecorder() *peerRecorder {
	return &peerRecorder{distinct: map[uuid.UUID]struct{}{}, warm: make(chan struct{})}
}

func (r *peerRecorder) arrived(idText string, at int64) {
	if idText == warmupID {
		r.warmOnce.Do(func() { close(r.warm) })
		return
	}
	id, err := uuid.Parse(idText)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.bad++
		return
	}
	r.distinct[id] = struct{}{}
	r.sink.received([]uuid.UUID{id}, at)
}

func (r *peerRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.distinct)
}

// runPeerChild runs cfg.Peer's consumer from READY until EXPECT n is met or STOP, then
// writes its receipts and prints its result.
func runPeerChild(cfg childConfig, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := benchdb.Open(ctx, cfg.DSN, cfg.DB, peerPoolConns, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	rec := newPeerRecorder()
	var stop func() error
	switch cfg.Peer {
	case peerWatermill:
		stop, err = startWatermill(ctx, pool, cfg.PeerPoll, rec, log)
	case peerRiver:
		stop, err = startRiver(ctx, pool, cfg.PeerPoll, rec, log)
	default:
		err = fmt.Errorf("unknown peer %q", cfg.Peer)
	}
	if err != nil {
		return err
	}
	select {
	case <-rec.warm:
	case <-time.After(30 * time.Second):
		return errors.Join(fmt.Errorf("%s: the warm-up message did not arrive in 30 s", cfg.Peer), stop())
	}
	// Let the peer settle after its first message (River's listener, watermill's
	// back-off), as the relay child waits for its leases and listener.
	time.Sleep(time.Second)
	if _, err := fmt.Fprintln(out, "READY"); err != nil {
		return errors.Join(fmt.Errorf("report ready: %w", err), stop())
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd := strings.TrimSpace(sc.Text())
		if cmd == "STOP" {
			break
		}
		if n, ok := strings.CutPrefix(cmd, "EXPECT "); ok {
			want, err := strconv.Atoi(n)
			if err != nil {
				return errors.Join(fmt.Errorf("bad command %q", cmd), stop())
			}
			deadline := time.Now().Add(2 * time.Minute)
			for rec.count() < want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			break
		}
	}
	if err := stop(); err != nil {
		return err
	}
	if rec.bad > 0 {
		return fmt.Errorf("%s: %d messages with an id that is not a uuid", cfg.Peer, rec.bad)
	}
	if err := rec.sink.writeTo(cfg.Receipts); err != nil {
		return err
	}
	b, err := json.Marshal(childResult{Acked: int64(rec.count())})
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if _, err := fmt.Fprintf(out, "RESULT %s\n", b); err != nil {
		return fmt.Errorf("report result: %w", err)
	}
	return nil
}

// startWatermill runs watermill-sql's PostgreSQL subscriber on the forwarder topic
// (standard schema and offsets adapters, PollInterval poll, InitializeSchema) under
// watermill's forwarder, which forwards every envelope to the recording publisher. It
// publishes one warm-up message through the same forwarder publisher the producer uses.
func startWatermill(ctx context.Context, pool *pgxpool.Pool, poll time.Duration, rec *peerRecorder, log *slog.Logger) (func() error, error) {
	logger := watermill.NewSlogLogger(log)
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{
		SchemaAdapter:    watermillSchemaAdapter(),
		OffsetsAdapter:   watermillOffsetsAdapter(),
		PollInterval:     poll,
		InitializeSchema: true,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("watermill subscriber: %w", err)
	}
	fwd, err := forwarder.NewForwarder(sub, recordingPublisher{rec}, logger, forwarder.Config{ForwarderTopic: watermillForwarderTopic})
	if err != nil {
		return nil, fmt.Errorf("watermill forwarder: %w", err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- fwd.Run(ctx) }()
	select {
	case <-fwd.Running():
	case err := <-runErr:
		return nil, fmt.Errorf("watermill forwarder: %w", err)
	}
	stop := func() error {
		err := fwd.Close()
		if rerr := <-runErr; rerr != nil {
			err = errors.Join(err, rerr)
		}
		if err != nil {
			return fmt.Errorf("stop watermill forwarder: %w", err)
		}
		return nil
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return publishWatermill(ctx, tx, warmupID, benchdb.Payload, logger)
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("watermill warm-up: %w", err), stop())
	}
	return stop, nil
}

// publishWatermill publishes one message (uuid id) in tx the way watermill's
// transactional forwarder example does: a watermill-sql publisher over the
// transaction, decorated by the forwarder's publisher, which envelopes it for the
// forwarder topic.
func publishWatermill(ctx context.Context, tx pgx.Tx, id string, payload []byte, logger watermill.LoggerAdapter) error {
	p, err := wmsql.NewPublisher(wmsql.TxFromPgx(tx), wmsql.PublisherConfig{SchemaAdapter: watermillSchemaAdapter()}, logger)
	if err != nil {
		return fmt.Errorf("watermill publisher: %w", err)
	}
	msg := message.NewMessage(id, payload)
	msg.SetContext(ctx)
	if err := forwarder.NewPublisher(p, forwarder.PublisherConfig{ForwarderTopic: watermillForwarderTopic}).Publish(watermillDestTopic, msg); err != nil {
		return fmt.Errorf("watermill publish: %w", err)
	}
	return nil
}

// startRiver starts a River client working the default queue (MaxWorkers
// riverMaxWorkers) with the recording worker, and works one warm-up job.
func startRiver(ctx context.Context, pool *pgxpool.Pool, fetch time.Duration, rec *peerRecorder, log *slog.Logger) (func() error, error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &recordingWorker{rec: rec})
	cfg := riverConfig(fetch, log)
	cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}}
	cfg.Workers = workers
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return nil, fmt.Errorf("start river client: %w", err)
	}
	stop := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.Stop(sctx); err != nil {
			return fmt.Errorf("stop river client: %w", err)
		}
		return nil
	}
	if _, err := client.Insert(ctx, benchJobArgs{EventID: warmupID, Payload: benchdb.Payload}, nil); err != nil {
		return nil, errors.Join(fmt.Errorf("river warm-up: %w", err), stop())
	}
	return stop, nil
}
