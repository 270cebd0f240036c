package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// Handler applies one event in the consumer's transaction: its database work goes
// through tx, so it commits with the dedup record or not at all. It must not commit
// or roll back tx. Return an error marked with [outbox.Permanent] for an event that can
// never be applied (it is quarantined); any other error rolls everything back and is
// returned by Process, so the message is delivered again.
type Handler func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error

// Consumer processes messages for one named consumer. It is safe for concurrent use.
type Consumer struct {
	name         string
	schema       string
	gap          GapPolicy
	firstVersion FirstVersion
	accept       map[Schema]bool // nil: every pair
	logger       *slog.Logger
	observer     Observer
	q            *queries
	stats        counters
}

// New returns a Consumer for cfg. cfg.Name is required.
func New(cfg *Config) (*Consumer, error) {
	if cfg == nil {
		return nil, errors.New("inbox: Config is nil: Config.Name is required")
	}
	if err := validateName("Config.Name", cfg.Name); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	schema := cfg.Schema
	if schema == "" {
		schema = sqlq.DefaultSchema
	}
	quoted, err := sqlq.QuoteSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("inbox: Config.Schema: %w", err)
	}
	if cfg.Gap < GapPark || cfg.Gap > GapRetry {
		return nil, fmt.Errorf("inbox: Config.Gap is %d: use GapPark, GapApply or GapRetry", int(cfg.Gap))
	}
	if cfg.FirstVersion < FirstVersionOne || cfg.FirstVersion > FirstVersionAny {
		return nil, fmt.Errorf("inbox: Config.FirstVersion is %d: use FirstVersionOne or FirstVersionAny", int(cfg.FirstVersion))
	}
	c := &Consumer{
		name: cfg.Name, schema: schema, gap: cfg.Gap, firstVersion: cfg.FirstVersion,
		logger: cfg.Logger, observer: cfg.Observer, q: newQueries(quoted),
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Accept != nil {
		c.accept = make(map[Schema]bool, len(cfg.Accept))
		for i, s := range cfg.Accept {
			if s.EventType == "" {
				return nil, fmt.Errorf("inbox: Config.Accept[%d].EventType is empty", i)
			}
			if s.SchemaVersion < 1 {
				return nil, fmt.Errorf("inbox: Config.Accept[%d].SchemaVersion is %d; schema versions start at 1", i, s.SchemaVersion)
			}
			c.accept[s] = true
		}
	}
	return c, nil
}

// Name returns the consumer's name.
func (c *Consumer) Name() string { return c.name }

// Process records msg for the consumer and runs h in one transaction begun on db (a
// *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx), and reports what became of msg.
//
// On a pool or a connection, Process commits before it returns: ack the broker only
// after it returned a nil error, whatever the Outcome. On an error nothing was
// recorded (the transaction rolled back): nak the message (or let it be redelivered),
// except for a [MessageError], which redelivery cannot fix.
//
// Given a pgx.Tx (to process inside a transaction of the caller's own), Process works in
// a savepoint of it and nothing is durable until the caller commits: ack after that
// commit. The counters ([Consumer.Stats]) count such a call when Process returns, also
// if the caller then rolls back.
func (c *Consumer) Process(ctx context.Context, db outbox.TxBeginner, msg outbox.Message, h Handler) (Result, error) {
	start := time.Now()
	if err := checkArgs(db == nil, h == nil); err != nil {
		return Result{}, err
	}
	if err := validateMessage(&msg); err != nil {
		return c.invalid(start, msg, err)
	}
	var res Result
	var st tally
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		st = tally{}
		run := func(ctx context.Context, m outbox.Message) error { return h(ctx, tx, m) }
		var err error
		res, err = c.process(ctx, pgxConn{tx}, msg, run, &st, nil)
		return err
	})
	return c.finish(ctx, start, msg, res, &st, err)
}

// Process is [Consumer.Process] for a consumer with the default configuration (gap
// policy GapPark, every schema accepted, schema "outbox"). Create a [Consumer] with [New]
// for other settings and for counters.
func Process(ctx context.Context, db outbox.TxBeginner, consumer string, msg outbox.Message, h Handler) (Result, error) {
	if err := validateName("consumer", consumer); err != nil {
		return Result{}, fmt.Errorf("inbox: %w", err)
	}
	c, err := New(&Config{Name: consumer})
	if err != nil {
		return Result{}, err
	}
	return c.Process(ctx, db, msg, h)
}

func checkArgs(nilDB, nilHandler bool) error {
	if nilDB {
		return errors.New("inbox: db is nil: pass a pool, a connection or a transaction")
	}
	if nilHandler {
		return errors.New("inbox: handler is nil")
	}
	return nil
}

// invalid counts and reports a message refused before its transaction began.
func (c *Consumer) invalid(start time.Time, msg outbox.Message, err error) (Result, error) {
	c.stats.errors.Add(1)
	c.observe(start, msg, Result{}, nil, 0, err)
	return Result{}, err
}

// finish counts, reports and logs a finished call that began at start, and wraps its
// error. st is what the call's transaction did: counted when err is nil; on an error,
// only its handler time is reported (st may then be nil).
func (c *Consumer) finish(ctx context.Context, start time.Time, msg outbox.Message, res Result, st *tally, err error) (Result, error) {
	if err != nil {
		if errors.Is(err, ErrGap) {
			c.stats.gapRetries.Add(1)
		} else {
			c.stats.errors.Add(1)
		}
		err = fmt.Errorf("inbox: process event %s for %s: %w", msg.ID, c.name, err)
		c.observe(start, msg, Result{}, st, 0, err)
		return Result{}, err
	}
	c.stats.add(st)
	var lag time.Duration
	if res.Outcome == Applied && !msg.CreatedAt.IsZero() {
		lag = time.Since(msg.CreatedAt)
		c.stats.lag.Store(int64(lag))
	}
	c.observe(start, msg, res, st, lag, nil)
	for _, q := range st.quarantined {
		c.logger.WarnContext(ctx, "quarantined event", slog.String("consumer", c.name), slog.String("event_id", q.msg.ID.String()),
			slog.String("event_type", q.msg.EventType), slog.Int("schema_version", q.msg.SchemaVersion),
			slog.String("aggregate_type", q.msg.AggregateType), slog.String("aggregate_id", q.msg.AggregateID),
			slog.Int64("aggregate_version", q.msg.AggregateVersion), slog.String("kind", string(q.kind)), slog.String("reason", q.reason))
	}
	if res.Outcome == Duplicate || res.Outcome == Stale {
		c.logger.DebugContext(ctx, "skipped event", slog.String("consumer", c.name), slog.String("event_id", msg.ID.String()),
			slog.String("outcome", res.Outcome.String()), slog.Int64("aggregate_version", msg.AggregateVersion))
	}
	return res, nil
}
