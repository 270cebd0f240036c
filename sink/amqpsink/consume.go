package amqpsink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// RunnerConfig configures a [Runner]. Zero fields take the defaults given at each.
type RunnerConfig struct {
	// URL of the broker, amqp:// or amqps://. Required.
	URL string
	// AMQP is the connection configuration, passed to amqp.DialConfig. Default:
	// amqp091-go's defaults.
	AMQP amqp.Config
	// Queue is the queue to consume; it must exist. Required.
	Queue string
	// Workers is how many messages are processed at once, 1 to 1024. Messages of one
	// aggregate go to the same worker, one at a time. Default 8.
	Workers int
	// Prefetch is the channel's QoS prefetch count: how many unacked messages the
	// broker hands the runner ahead. Default 2 × Workers.
	Prefetch int
	// RetryDelay is how long a message whose Process failed waits before it comes
	// back: the runner publishes it to RetryQueue, whose messages expire after
	// RetryDelay into Queue (a TTL and a dead-letter route through the default
	// exchange), and acks the original once the broker confirmed the copy — never an
	// immediate requeue loop. Default 1 s.
	RetryDelay time.Duration
	// RetryQueue is the retry queue's name, declared by the runner (durable, with
	// x-message-ttl RetryDelay and a dead-letter route back to Queue). Default
	// Queue + ".retry". A queue of that name declared with other arguments is refused
	// by the broker: delete it when RetryDelay changes.
	RetryQueue string
	// Logger receives a line per message refused for good. Default: discard.
	Logger *slog.Logger
}

// Runner feeds a RabbitMQ queue to [inbox.Consumer.Process] with manual acks: a
// message is acked after its transaction committed; a failed one goes through the
// retry queue (RetryDelay later it is back in Queue); one that cannot be decoded or
// recorded is rejected without requeue (to the queue's dead-letter exchange, if it has
// one). A crash between the commit and the ack makes the broker redeliver the message:
// the inbox finds it a duplicate.
//
// Order: a retried message comes back behind the messages published meanwhile, so an
// aggregate's later events can pass it; versioned events are put back in order by the
// inbox (GapPark). Across instances, per-aggregate order needs a single active
// consumer per queue (x-single-active-consumer) or a consistent-hash exchange spreading
// aggregates over queues, one consumer each.
type Runner struct {
	db      outbox.TxBeginner
	inbox   *inbox.Consumer
	handler inbox.Handler
	cfg     RunnerConfig
	logger  *slog.Logger
}

// NewRunner returns a Runner of cfg.Queue into c with h, on db.
func NewRunner(db outbox.TxBeginner, c *inbox.Consumer, h inbox.Handler, cfg *RunnerConfig) (*Runner, error) {
	switch {
	case db == nil:
		return nil, errors.New("amqpsink: NewRunner: db is nil")
	case c == nil:
		return nil, errors.New("amqpsink: NewRunner: the inbox consumer is nil")
	case h == nil:
		return nil, errors.New("amqpsink: NewRunner: the handler is nil")
	case cfg == nil:
		return nil, errors.New("amqpsink: NewRunner: RunnerConfig is nil: URL and Queue are required")
	}
	rc := *cfg
	switch {
	case rc.URL == "":
		return nil, errors.New("amqpsink: RunnerConfig.URL is empty")
	case rc.Queue == "":
		return nil, errors.New("amqpsink: RunnerConfig.Queue is empty")
	}
	rc.Workers = cmp.Or(rc.Workers, 8)
	if rc.Workers < 1 || rc.Workers > 1024 {
		return nil, fmt.Errorf("amqpsink: RunnerConfig.Workers is %d; it must be between 1 and 1024", rc.Workers)
	}
	rc.Prefetch = cmp.Or(rc.Prefetch, 2*rc.Workers)
	if rc.Prefetch < 1 {
		return nil, fmt.Errorf("amqpsink: RunnerConfig.Prefetch is %d; it must be at least 1", rc.Prefetch)
	}
	rc.RetryDelay = cmp.Or(rc.RetryDelay, time.Second)
	if rc.RetryDelay < time.Millisecond {
		return nil, fmt.Errorf("amqpsink: RunnerConfig.RetryDelay is %s; it must be at least 1ms", rc.RetryDelay)
	}
	rc.RetryQueue = cmp.Or(rc.RetryQueue, rc.Queue+".retry")
	logger := rc.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{db: db, inbox: c, handler: h, cfg: rc, logger: logger}, nil
}

type delivery struct {
	d   amqp.Delivery
	msg outbox.Message
}

// retrier publishes copies to the retry queue on a confirming channel of its own.
type retrier struct {
	mu    sync.Mutex
	ch    *amqp.Channel
	queue string
}

func (r *retrier) publish(ctx context.Context, d amqp.Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	conf, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", r.queue, true, false, amqp.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, DeliveryMode: amqp.Persistent, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, Body: d.Body,
	})
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the broker nacked the retry copy")
	}
	return nil
}

// Run consumes until ctx is done, then cancels the subscription, lets the workers
// settle what they hold (a message not begun is requeued), and returns nil. It returns
// an error when the connection cannot be set up or is lost.
func (r *Runner) Run(ctx context.Context) error {
	conn, err := amqp.DialConfig(r.cfg.URL, r.cfg.AMQP)
	if err != nil {
		return fmt.Errorf("amqpsink: runner: connect: %w", err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpsink: runner: channel: %w", err)
	}
	if err := ch.Qos(r.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("amqpsink: runner: prefetch: %w", err)
	}
	if _, err := ch.QueueDeclare(r.cfg.RetryQueue, true, false, false, false, amqp.Table{
		"x-message-ttl": r.cfg.RetryDelay.Milliseconds(), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": r.cfg.Queue,
	}); err != nil {
		return fmt.Errorf("amqpsink: runner: declare the retry queue %s: %w", r.cfg.RetryQueue, err)
	}
	pub, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpsink: runner: channel: %w", err)
	}
	if err := pub.Confirm(false); err != nil {
		return fmt.Errorf("amqpsink: runner: confirms: %w", err)
	}
	retry := &retrier{ch: pub, queue: r.cfg.RetryQueue}
	subCtx, cancelSub := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSub()
	deliveries, err := ch.ConsumeWithContext(subCtx, r.cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqpsink: runner: consume %s: %w", r.cfg.Queue, err)
	}
	queues := make([]chan delivery, r.cfg.Workers)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan delivery, 1)
		wg.Go(func() { r.work(ctx, retry, queues[i]) })
	}
	defer func() {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("amqpsink: runner: the subscription ended (connection or channel closed)")
			}
			msg, err := decodeDelivery(d)
			if err != nil {
				r.reject(ctx, d, err)
				continue
			}
			select {
			case queues[inbox.Shard(msg.AggregateType, msg.AggregateID, len(queues))] <- delivery{d, msg}:
			case <-ctx.Done():
				_ = d.Nack(false, true)
				return nil
			}
		}
	}
}

func (r *Runner) work(ctx context.Context, retry *retrier, q <-chan delivery) {
	for j := range q {
		if ctx.Err() != nil {
			_ = j.d.Nack(false, true) // not begun: back to the queue
			continue
		}
		_, err := r.inbox.Process(ctx, r.db, j.msg, r.handler)
		switch {
		case err == nil:
			_ = j.d.Ack(false) // after the commit
		case errors.Is(err, inbox.ErrInvalidMessage):
			r.reject(ctx, j.d, err)
		default:
			pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			perr := retry.publish(pubCtx, j.d)
			cancel()
			if perr != nil {
				// The copy is not safely in the retry queue: leave the original
				// unacked for the broker to redeliver.
				r.logger.WarnContext(ctx, "could not route a failed message to the retry queue", slog.String("error", perr.Error()))
				_ = j.d.Nack(false, true)
				continue
			}
			_ = j.d.Ack(false)
		}
	}
}

func (r *Runner) reject(ctx context.Context, d amqp.Delivery, err error) {
	r.logger.WarnContext(ctx, "rejected a message that cannot be processed", slog.String("message_id", d.MessageId), slog.String("error", err.Error()))
	_ = d.Nack(false, false)
}

// decodeDelivery reads the shared message format from a delivery.
func decodeDelivery(d amqp.Delivery) (outbox.Message, error) {
	var hs []sinkformat.Header
	for name, v := range d.Headers {
		s, ok := v.(string)
		if !ok {
			continue // broker-added headers (x-death, …)
		}
		hs = append(hs, sinkformat.Header{Name: name, Value: s})
	}
	msg, err := sinkformat.Decode(sinkformat.AMQP, hs, d.Body)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("amqpsink: %w: %w", inbox.ErrInvalidMessage, err)
	}
	return msg, nil
}
