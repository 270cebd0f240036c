// Package natssink is an [outbox.Sink] for NATS JetStream, on nats.go's jetstream
// package.
//
// Each event is published to a subject of one stream, with its id as Nats-Msg-Id (the
// stream drops a second copy within its duplicate window) and the headers of the
// shared message format (docs/message-format.md): the default names, or CloudEvents
// binary mode. The payload is the message data, byte for byte. Publishes are
// asynchronous: a call sends the next message of every aggregate at once, gathers
// their PubAcks, then sends the next ones, so a message whose predecessor failed is
// never sent.
//
// "No responders" and ack timeouts are also what a JetStream outage looks like: the
// sink asks the stream for its info before it counts one as the message's failure. A
// healthy stream makes "no responders" a permanent failure (the subject belongs to no
// stream) and a timeout a transient one; an unreachable stream makes both
// [outbox.Unavailable].
//
// Durability: JetStream acks a message once it is in the stream's leader's (and, when
// replicated, a quorum's) memory and written to the file, before fsync, unless the
// server runs with sync_interval: always (the default syncs every 2 minutes), so a
// machine that loses power can lose acked messages. Broker-side dedup spans only the
// stream's duplicate window (Duplicates, default 2 minutes): a republish later than
// that is stored twice, and consumers must deduplicate by id.
//
// Create the connection with nats.ReconnectBufSize(-1): while it reconnects, a publish
// then fails at once (reported as [outbox.Unavailable]) instead of waiting in a buffer
// that would be flushed after the relay has given up on it.
//
// On the consuming side, [Runner] feeds a JetStream pull consumer to package inbox
// (effects once), acking after the commit.
package natssink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// DefaultSubject is the subject template of a Config without one.
const DefaultSubject = "outbox.event.{{.AggregateType}}"

// Config configures a [Sink]. Zero fields take the defaults given at each.
type Config struct {
	// Stream names the JetStream stream every subject the sink publishes to belongs
	// to. New looks it up (it must exist); its info tells an outage from a subject
	// that no stream takes. Required.
	Stream string
	// Subject is a text/template over the [outbox.Message] giving the subject of an
	// event whose Topic is empty; a set Topic is the subject itself. A subject NATS
	// forbids (an empty token, a wildcard, whitespace) fails that event permanently.
	// Default [DefaultSubject].
	Subject string
	// Format of the headers: [sinkformat.Outbox] (default) or [sinkformat.CloudEvents].
	Format sinkformat.Format
	// Source is the CloudEvents source attribute. Default [sinkformat.DefaultSource].
	Source string
	// AckTimeout bounds the wait for the PubAcks of one wave of messages. Default 5s.
	AckTimeout time.Duration
	// HealthTimeout bounds the stream info request that tells an outage from a
	// message's own failure. Default 2s.
	HealthTimeout time.Duration
	// Logger: default discard.
	Logger *slog.Logger
}

// Sink publishes to NATS JetStream. It is safe for concurrent use.
type Sink struct {
	js      jetstream.JetStream
	stream  jetstream.Stream
	router  *sinkformat.Router
	encoder *sinkformat.Encoder
	cfg     Config
}

// New returns a sink publishing through js; it looks the stream up, so the server
// must be reachable. A nil cfg is not valid: Stream is required.
func New(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Sink, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("natssink: %w", err)
	}
	router, err := sinkformat.NewRouter(c.Subject, sinkformat.NATSSubject)
	if err != nil {
		return nil, fmt.Errorf("natssink: Subject: %w", err)
	}
	encoder, err := sinkformat.NewEncoder(sinkformat.NATS, c.Format, c.Source)
	if err != nil {
		return nil, fmt.Errorf("natssink: %w", err)
	}
	stream, err := js.Stream(ctx, c.Stream)
	if err != nil {
		return nil, fmt.Errorf("natssink: look up stream %q: %w", c.Stream, err)
	}
	if js.Conn().Opts.ReconnectBufSize >= 0 {
		c.Logger.Warn("natssink: the connection buffers publishes while it reconnects; create it with nats.ReconnectBufSize(-1) so that an outage fails publishes at once",
			slog.Int("reconnect_buf_size", js.Conn().Opts.ReconnectBufSize))
	}
	return &Sink{js: js, stream: stream, router: router, encoder: encoder, cfg: c}, nil
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg.Subject = cmp.Or(cfg.Subject, DefaultSubject)
	cfg.AckTimeout = cmp.Or(cfg.AckTimeout, 5*time.Second)
	cfg.HealthTimeout = cmp.Or(cfg.HealthTimeout, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.Stream == "" {
		errs = append(errs, errors.New("Stream is required"))
	}
	if cfg.AckTimeout < 0 {
		errs = append(errs, fmt.Errorf("AckTimeout must be positive, got %s", cfg.AckTimeout))
	}
	if cfg.HealthTimeout < 0 {
		errs = append(errs, fmt.Errorf("HealthTimeout must be positive, got %s", cfg.HealthTimeout))
	}
	return cfg, errors.Join(errs...)
}

// errCodeHeaderTooLarge is JetStream's error code for headers over its limit (64 KiB).
const errCodeHeaderTooLarge jetstream.ErrorCode = 10097

// pending is one message sent and waiting for its PubAck.
type pending struct {
	i   int
	ack jetstream.PubAckFuture
}

// Publish sends msgs wave by wave and returns one result per message: nil once the
// stream acked it (a duplicate ack too), [outbox.Permanent] for a message that cannot
// be sent or that no stream takes, [outbox.Unavailable] while the server or the
// stream cannot be reached, ctx's error when it ends first, and
// [outbox.ErrNotSent] after an earlier message of the same aggregate failed.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	plan := sinkformat.NewPlan(ctx, msgs)
	out := make([]*nats.Msg, len(msgs))
	for i := range msgs {
		m, err := s.message(&msgs[i])
		if err != nil {
			plan.Fail(i, outbox.Permanent(fmt.Errorf("natssink: event %s: %w", msgs[i].ID, err)))
			continue
		}
		out[i] = m
	}
	for wave := plan.Next(); wave != nil; wave = plan.Next() {
		if err := ctx.Err(); err != nil {
			plan.FailRest(err)
			break
		}
		if !s.js.Conn().IsConnected() {
			plan.FailRest(outbox.Unavailable(fmt.Errorf("natssink: %w (status %s)", nats.ErrDisconnected, s.js.Conn().Status())))
			break
		}
		sent := make([]pending, 0, len(wave))
		for _, i := range wave {
			ack, err := s.js.PublishMsgAsync(out[i], jetstream.WithMsgID(msgs[i].ID.String()))
			if err != nil {
				plan.Fail(i, s.classify(ctx, msgs[i], err))
				continue
			}
			sent = append(sent, pending{i, ack})
		}
		s.await(ctx, msgs, sent, plan)
	}
	return plan.Errors()
}

// message builds the NATS message of m.
func (s *Sink) message(m *outbox.Message) (*nats.Msg, error) {
	subject, err := s.router.Route(m)
	if err != nil {
		return nil, err
	}
	headers, err := s.encoder.Headers(*m)
	if err != nil {
		return nil, err
	}
	h := make(nats.Header, len(headers)+1)
	for _, kv := range headers {
		h[kv.Name] = []string{kv.Value} // as written: Header.Set would not keep the case either way
	}
	return &nats.Msg{Subject: subject, Header: h, Data: m.Payload}, nil
}

// await gathers the acks of one wave.
func (s *Sink) await(ctx context.Context, msgs []outbox.Message, sent []pending, plan *sinkformat.Plan) {
	timer := time.NewTimer(s.cfg.AckTimeout)
	defer timer.Stop()
	for n, p := range sent {
		select {
		case <-p.ack.Ok(): // a duplicate=true ack means the stream already holds it: success
		case err := <-p.ack.Err():
			plan.Fail(p.i, s.classify(ctx, msgs[p.i], err))
		case <-timer.C:
			herr := s.healthy(ctx)
			for _, q := range sent[n:] {
				plan.Fail(q.i, s.unanswered(ctx, msgs[q.i], jetstream.ErrAsyncPublishTimeout, herr))
			}
			return
		case <-ctx.Done():
			for _, q := range sent[n:] {
				plan.Fail(q.i, fmt.Errorf("natssink: event %s: no ack before ctx ended: %w", msgs[q.i].ID, ctx.Err()))
			}
			return
		}
	}
}

// classify maps a publish error to the failure classes of [outbox.Sink].
func (s *Sink) classify(ctx context.Context, m outbox.Message, err error) error {
	wrapped := fmt.Errorf("natssink: publish event %s: %w", m.ID, err)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum),
		errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeHeaderTooLarge:
		return outbox.Permanent(wrapped)
	case errors.As(err, &apiErr):
		return wrapped // the stream answered: this message, not the server
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrConnectionReconnecting):
		return outbox.Unavailable(wrapped)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrTimeout):
		return s.unanswered(ctx, m, err, s.healthy(ctx))
	}
	return wrapped
}

// unanswered classifies a publish that got no answer from a stream, err ("no
// responders" or a timeout), by the stream's health, herr.
func (s *Sink) unanswered(ctx context.Context, m outbox.Message, err, herr error) error {
	wrapped := fmt.Errorf("natssink: publish event %s: %w", m.ID, err)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", wrapped, ctx.Err())
	case herr != nil:
		return outbox.Unavailable(fmt.Errorf("%w; stream %s: %w", wrapped, s.cfg.Stream, herr))
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		subject, _ := s.router.Route(&m)
		return outbox.Permanent(fmt.Errorf("%w: stream %s is healthy, so no stream takes subject %q", wrapped, s.cfg.Stream, subject))
	}
	return wrapped
}

// healthy asks the stream for its info: an error means the server or the stream's
// leader cannot be reached.
func (s *Sink) healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HealthTimeout)
	defer cancel()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return err
	}
	if info.Cluster != nil && info.Cluster.Leader == "" && len(info.Cluster.Replicas) > 0 {
		return errors.New("stream has no leader")
	}
	return nil
}
