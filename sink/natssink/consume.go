package natssink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// RunnerConfig configures a [Runner]. Zero fields take the defaults given at each.
type RunnerConfig struct {
	// Workers is how many messages are processed at once, 1 to 1024. Messages of one
	// aggregate always go to the same worker, so they are processed one at a time, in
	// the order the consumer delivers them; different aggregates go in parallel.
	// Default 8.
	Workers int
	// Prefetch is how many messages the pull consumer asks JetStream for ahead
	// (PullMaxMessages). Default 2 × Workers. Keep the consumer's MaxAckPending at or
	// above it.
	Prefetch int
	// RetryDelay is the delay of the Nak that sends a message back after Process
	// returned an error (a handler's transient error, a GapError under GapRetry, the
	// database unreachable). Default 1 s.
	RetryDelay time.Duration
	// Logger receives a line per message refused for good (terminated). Default: discard.
	Logger *slog.Logger
}

// Runner feeds a JetStream pull consumer to [inbox.Consumer.Process]: each message is
// decoded (the shared message format, either header style), processed in its
// transaction on db, and acked after the commit; a message whose Process failed is
// Nak'ed with RetryDelay, so JetStream redelivers it later (never an immediate loop); a
// message that cannot be decoded or recorded ([inbox.ErrInvalidMessage]) is
// terminated. A lost ack, or a crash between the commit and the ack, makes JetStream
// redeliver the message after the consumer's AckWait: the inbox finds it a duplicate.
//
// Across instances: JetStream hands messages of one consumer to whichever instance
// pulls, so per-aggregate order across instances needs one consumer per partition of
// the subject space (e.g. a subject per aggregate-hash range, each consumed by one
// instance); with GapPark the inbox restores the order of versioned events anyway,
// by parking.
type Runner struct {
	cons    jetstream.Consumer
	db      outbox.TxBeginner
	inbox   *inbox.Consumer
	handler inbox.Handler
	cfg     RunnerConfig
	logger  *slog.Logger
}

// NewRunner returns a Runner of cons into c with h, on db.
func NewRunner(cons jetstream.Consumer, db outbox.TxBeginner, c *inbox.Consumer, h inbox.Handler, cfg *RunnerConfig) (*Runner, error) {
	switch {
	case cons == nil:
		return nil, errors.New("natssink: NewRunner: the jetstream consumer is nil")
	case db == nil:
		return nil, errors.New("natssink: NewRunner: db is nil")
	case c == nil:
		return nil, errors.New("natssink: NewRunner: the inbox consumer is nil")
	case h == nil:
		return nil, errors.New("natssink: NewRunner: the handler is nil")
	}
	var rc RunnerConfig
	if cfg != nil {
		rc = *cfg
	}
	rc.Workers = cmp.Or(rc.Workers, 8)
	if rc.Workers < 1 || rc.Workers > 1024 {
		return nil, fmt.Errorf("natssink: RunnerConfig.Workers is %d; it must be between 1 and 1024", rc.Workers)
	}
	rc.Prefetch = cmp.Or(rc.Prefetch, 2*rc.Workers)
	if rc.Prefetch < 1 {
		return nil, fmt.Errorf("natssink: RunnerConfig.Prefetch is %d; it must be at least 1", rc.Prefetch)
	}
	rc.RetryDelay = cmp.Or(rc.RetryDelay, time.Second)
	if rc.RetryDelay < 0 {
		return nil, fmt.Errorf("natssink: RunnerConfig.RetryDelay is %s; it must not be negative", rc.RetryDelay)
	}
	logger := rc.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{cons: cons, db: db, inbox: c, handler: h, cfg: rc, logger: logger}, nil
}

// Run pulls and processes messages until ctx is done, then stops pulling, lets the
// workers settle the messages they hold (a message not yet begun is Nak'ed without
// delay, one in Process finishes or rolls back with ctx), and returns nil. It returns
// an error when the pull itself fails for good.
func (r *Runner) Run(ctx context.Context) error {
	it, err := r.cons.Messages(jetstream.PullMaxMessages(r.cfg.Prefetch))
	if err != nil {
		return fmt.Errorf("natssink: start pulling: %w", err)
	}
	queues := make([]chan delivery, r.cfg.Workers)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan delivery, 1)
		wg.Go(func() { r.work(ctx, queues[i]) })
	}
	defer func() {
		it.Stop()
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("natssink: pull: %w", err)
		}
		msg, err := decode(m)
		if err != nil {
			r.terminate(ctx, m, err)
			continue
		}
		q := queues[inbox.Shard(msg.AggregateType, msg.AggregateID, len(queues))]
		select {
		case q <- delivery{m, msg}:
		case <-ctx.Done():
			_ = m.Nak()
			return nil
		}
	}
}

// delivery is a pulled message and its decoded event.
type delivery struct {
	m   jetstream.Msg
	msg outbox.Message
}

// work processes the messages of its share of the aggregates, one at a time.
func (r *Runner) work(ctx context.Context, q <-chan delivery) {
	for d := range q {
		m := d.m
		if ctx.Err() != nil {
			_ = m.Nak() // not begun: let another instance have it now
			continue
		}
		_, err := r.inbox.Process(ctx, r.db, d.msg, r.handler)
		switch {
		case err == nil:
			// The commit is done: ack. A lost ack means a redelivery, which the inbox
			// finds a duplicate.
			_ = m.Ack()
		case errors.Is(err, inbox.ErrInvalidMessage):
			r.terminate(ctx, m, err)
		default:
			_ = m.NakWithDelay(r.cfg.RetryDelay)
		}
	}
}

func (r *Runner) terminate(ctx context.Context, m jetstream.Msg, err error) {
	r.logger.WarnContext(ctx, "terminated a message that cannot be processed", slog.String("subject", m.Subject()), slog.String("error", err.Error()))
	_ = m.TermWithReason(err.Error())
}

// decode reads the shared message format from a JetStream message.
func decode(m jetstream.Msg) (outbox.Message, error) {
	var hs []sinkformat.Header
	for name, values := range m.Headers() {
		if len(values) == 0 || strings.HasPrefix(strings.ToLower(name), "nats-") {
			continue
		}
		hs = append(hs, sinkformat.Header{Name: name, Value: values[0]})
	}
	msg, err := sinkformat.Decode(sinkformat.NATS, hs, m.Data())
	if err != nil {
		return outbox.Message{}, fmt.Errorf("natssink: %w: %w", inbox.ErrInvalidMessage, err)
	}
	if md, err := m.Metadata(); err == nil {
		msg.Attempt = int(md.NumDelivered)
	}
	return msg, nil
}
