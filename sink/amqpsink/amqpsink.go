// Package amqpsink is an [outbox.Sink] for RabbitMQ (AMQP 0-9-1), on amqp091-go.
//
// Each event is published to one exchange with a routing key from a template, as a
// persistent message with publisher confirms and the mandatory flag: a message no
// queue takes comes back (basic.return, before its ack) and fails permanently — it is
// never dropped silently. The event id is the message-id property; the type,
// content-type and timestamp properties carry the event type, content type and
// creation time; the headers table carries the shared message format
// (docs/message-format.md), or CloudEvents binary mode ("cloudEvents:" properties).
// The payload is the body, byte for byte.
//
// The sink owns its connection and reconnects with backoff. Messages whose confirms
// were outstanding when the connection or channel dropped fail as
// [outbox.Unavailable], so the relay publishes them again (a consumer may see a
// duplicate, never a loss). While the broker has blocked the connection (a memory or
// disk alarm, connection.blocked), publishing pauses until it is unblocked, and fails
// as unavailable if that takes longer than ConfirmTimeout.
//
// Durability: a confirm means the message reached every queue it was routed to, and,
// for a durable queue with a persistent message, that it was written to disk
// (RabbitMQ confirms persistent messages after fsync, or once a quorum queue's
// majority has it). A message routed only to non-durable queues is lost if the broker
// restarts.
//
// On the consuming side, [Runner] feeds a queue to package inbox (effects once), with
// manual acks after the commit and delayed retries through a TTL retry queue.
package amqpsink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// DefaultRoutingKey is the routing key template of a Config without one.
const DefaultRoutingKey = "{{.AggregateType}}.{{.EventType}}"

// Config configures a [Sink]. Zero fields take the defaults given at each.
type Config struct {
	// URL of the broker, amqp:// or amqps://. Required.
	URL string
	// AMQP is the connection configuration (TLS, SASL, heartbeat, vhost, dialer),
	// passed to amqp.DialConfig. Default: amqp091-go's defaults.
	AMQP amqp.Config
	// Exchange the sink publishes to; it must exist. Default "": the default
	// exchange, which routes to the queue named by the routing key.
	Exchange string
	// RoutingKey is a text/template over the [outbox.Message] giving the routing key
	// of an event whose Topic is empty; a set Topic is the routing key itself.
	// Default [DefaultRoutingKey].
	RoutingKey string
	// Format of the headers: [sinkformat.Outbox] (default) or [sinkformat.CloudEvents].
	Format sinkformat.Format
	// Source is the CloudEvents source attribute. Default [sinkformat.DefaultSource].
	Source string
	// ConfirmTimeout bounds the wait for the confirms of one wave of messages, and the
	// pause while the broker blocks the connection. Default 10s.
	ConfirmTimeout time.Duration
	// ReconnectMin is the wait before the first reconnection; it doubles after each
	// failure up to ReconnectMax. Defaults 100ms and 5s.
	ReconnectMin time.Duration
	// ReconnectMax caps the wait between reconnections. Default 5s.
	ReconnectMax time.Duration
	// Logger: default discard.
	Logger *slog.Logger
}

// Sink publishes to RabbitMQ. It is safe for concurrent use; Close it when done.
type Sink struct {
	cfg     Config
	router  *sinkformat.Router
	encoder *sinkformat.Encoder

	mu       sync.Mutex
	sess     *session // nil while disconnected
	closed   bool
	changed  chan struct{} // closed and replaced whenever sess or its blocked state changes
	stop     chan struct{}
	stopped  chan struct{}
	returned map[string]amqp.Return // by message id, until the publisher takes it
}

// session is one connection and its confirm-mode channel.
type session struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	blocked string // the broker's reason while it blocks the connection
	frame   int    // the negotiated frame size
}

// New connects to the broker and returns a sink publishing to it. It fails when the
// first connection fails; later drops are reconnected.
func New(cfg *Config) (*Sink, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("amqpsink: %w", err)
	}
	router, err := sinkformat.NewRouter(c.RoutingKey, sinkformat.AMQPRoutingKey)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: RoutingKey: %w", err)
	}
	encoder, err := sinkformat.NewEncoder(sinkformat.AMQP, c.Format, c.Source)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: %w", err)
	}
	s := &Sink{
		cfg: c, router: router, encoder: encoder, changed: make(chan struct{}),
		stop: make(chan struct{}), stopped: make(chan struct{}), returned: make(map[string]amqp.Return),
	}
	sess, err := s.connect()
	if err != nil {
		return nil, err
	}
	s.sess = sess
	go s.keepConnected(sess)
	return s, nil
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg.RoutingKey = cmp.Or(cfg.RoutingKey, DefaultRoutingKey)
	cfg.ConfirmTimeout = cmp.Or(cfg.ConfirmTimeout, 10*time.Second)
	cfg.ReconnectMin = cmp.Or(cfg.ReconnectMin, 100*time.Millisecond)
	cfg.ReconnectMax = cmp.Or(cfg.ReconnectMax, 5*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.URL == "" {
		errs = append(errs, errors.New("URL is required"))
	}
	if cfg.ConfirmTimeout < 0 {
		errs = append(errs, fmt.Errorf("ConfirmTimeout must be positive, got %s", cfg.ConfirmTimeout))
	}
	if cfg.ReconnectMin < 0 || cfg.ReconnectMax < cfg.ReconnectMin {
		errs = append(errs, fmt.Errorf("ReconnectMax (%s) must be at least ReconnectMin (%s), both positive", cfg.ReconnectMax, cfg.ReconnectMin))
	}
	return cfg, errors.Join(errs...)
}

// connect dials and opens a channel in confirm mode.
func (s *Sink) connect() (*session, error) {
	conn, err := amqp.DialConfig(s.cfg.URL, s.cfg.AMQP)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: dial: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("amqpsink: open a confirm-mode channel: %w", err)
	}
	// Buffered: the connection's reader must never wait for us between a message's
	// basic.return and its basic.ack, and a publisher drains it after each ack.
	sess := &session{conn: conn, ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 1024)), frame: conn.Config.FrameSize}
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go s.watchBlocked(sess, blocked)
	return sess, nil
}

// watchBlocked follows connection.blocked and connection.unblocked.
func (s *Sink) watchBlocked(sess *session, blocked <-chan amqp.Blocking) {
	for b := range blocked {
		s.mu.Lock()
		sess.blocked = ""
		if b.Active {
			sess.blocked = cmp.Or(b.Reason, "no reason given")
		}
		s.signalLocked()
		s.mu.Unlock()
		s.cfg.Logger.Warn("amqpsink: the broker blocked or unblocked the connection", slog.Bool("blocked", b.Active), slog.String("reason", b.Reason))
	}
}

// signalLocked wakes everyone waiting for a change; s.mu is held.
func (s *Sink) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// keepConnected waits for the session to drop, then reconnects with backoff, until
// Close.
func (s *Sink) keepConnected(sess *session) {
	defer close(s.stopped)
	for {
		connClosed := sess.conn.NotifyClose(make(chan *amqp.Error, 1))
		chClosed := sess.ch.NotifyClose(make(chan *amqp.Error, 1))
		var reason *amqp.Error
		select {
		case reason = <-connClosed:
		case reason = <-chClosed:
		case <-s.stop:
			// Bounded: a broker that blocks the connection does not read its close.
			_ = sess.conn.CloseDeadline(time.Now().Add(s.cfg.ConfirmTimeout))
			return
		}
		s.mu.Lock()
		s.sess = nil
		s.signalLocked()
		s.mu.Unlock()
		_ = sess.conn.CloseDeadline(time.Now().Add(s.cfg.ConfirmTimeout))
		s.cfg.Logger.Warn("amqpsink: connection lost; reconnecting", slog.Any("reason", reason))
		wait := s.cfg.ReconnectMin
		for {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-s.stop:
				timer.Stop()
				return
			}
			next, err := s.connect()
			if err == nil {
				sess = next
				break
			}
			s.cfg.Logger.Warn("amqpsink: reconnect failed", slog.Any("error", err), slog.Duration("next_try_in", min(2*wait, s.cfg.ReconnectMax)))
			wait = min(2*wait, s.cfg.ReconnectMax)
		}
		s.mu.Lock()
		s.sess = sess
		s.signalLocked()
		s.mu.Unlock()
		s.cfg.Logger.Info("amqpsink: reconnected")
	}
}

// Close closes the connection (waiting at most ConfirmTimeout for the broker) and
// stops reconnecting.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.stopped
	return nil
}

// errDisconnected is the error, marked [outbox.Unavailable], of messages published
// while the sink reconnects.
var errDisconnected = errors.New("not connected to the broker; reconnecting")

// Publish sends msgs wave by wave and returns one result per message: nil once the
// broker confirmed it, [outbox.Permanent] when it came back unroutable or cannot be
// sent (a forbidden routing key, headers over the frame size), [outbox.Unavailable]
// while the sink is disconnected, the broker blocks it too long, or the connection
// dropped before the confirm, a plain error for a nack or a confirm that did not come
// in time, ctx's error when it ends first, and [outbox.ErrNotSent] after an earlier
// message of the same aggregate failed.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	plan := sinkformat.NewPlan(ctx, msgs)
	pubs := make([]amqp.Publishing, len(msgs))
	keys := make([]string, len(msgs))
	for i := range msgs {
		key, pub, err := s.publishing(&msgs[i])
		if err != nil {
			plan.Fail(i, outbox.Permanent(fmt.Errorf("amqpsink: event %s: %w", msgs[i].ID, err)))
			continue
		}
		keys[i], pubs[i] = key, pub
	}
	for wave := plan.Next(); wave != nil; wave = plan.Next() {
		sess, err := s.ready(ctx)
		if err != nil {
			plan.FailRest(err)
			break
		}
		s.sendWave(ctx, sess, msgs, keys, pubs, wave, plan)
	}
	return plan.Errors()
}

// publishing builds the routing key and message of m.
func (s *Sink) publishing(m *outbox.Message) (string, amqp.Publishing, error) {
	key, err := s.router.Route(m)
	if err != nil {
		return "", amqp.Publishing{}, err
	}
	headers, err := s.encoder.Headers(*m)
	if err != nil {
		return "", amqp.Publishing{}, err
	}
	table := make(amqp.Table, len(headers))
	for _, h := range headers {
		table[h.Name] = h.Value
	}
	return key, amqp.Publishing{
		Headers: table, ContentType: m.ContentType, DeliveryMode: amqp.Persistent, MessageId: m.ID.String(),
		Timestamp: m.CreatedAt, Type: m.EventType, Body: m.Payload,
	}, nil
}

// headerBytes estimates the encoded size of a content header frame's properties.
func headerBytes(key string, p *amqp.Publishing) int {
	n := 64 + len(key) + len(p.ContentType) + len(p.MessageId) + len(p.Type)
	for name, v := range p.Headers {
		n += len(name) + 6
		if s, ok := v.(string); ok {
			n += len(s)
		}
	}
	return n
}

// ready returns the current session once it is connected and not blocked.
func (s *Sink) ready(ctx context.Context) (*session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var timer *time.Timer
	for {
		s.mu.Lock()
		sess, changed, closed := s.sess, s.changed, s.closed
		var blocked string
		if sess != nil {
			blocked = sess.blocked
		}
		s.mu.Unlock()
		switch {
		case closed:
			return nil, outbox.Unavailable(errors.New("amqpsink: sink is closed"))
		case sess == nil:
			return nil, outbox.Unavailable(fmt.Errorf("amqpsink: %w", errDisconnected))
		case blocked == "":
			return sess, nil
		}
		if timer == nil {
			timer = time.NewTimer(s.cfg.ConfirmTimeout)
			defer timer.Stop()
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, outbox.Unavailable(fmt.Errorf("amqpsink: the broker has blocked the connection for %s: %s", s.cfg.ConfirmTimeout, blocked))
		case <-ctx.Done():
			return nil, fmt.Errorf("amqpsink: waiting for the broker to unblock the connection (%s): %w", blocked, ctx.Err())
		}
	}
}

// sendWave publishes one wave and waits for its confirms.
func (s *Sink) sendWave(ctx context.Context, sess *session, msgs []outbox.Message, keys []string, pubs []amqp.Publishing, wave []int, plan *sinkformat.Plan) {
	type pending struct {
		i  int
		dc *amqp.DeferredConfirmation
	}
	sent := make([]pending, 0, len(wave))
	for _, i := range wave {
		if n := headerBytes(keys[i], &pubs[i]); sess.frame > 0 && n > sess.frame-256 {
			plan.Fail(i, outbox.Permanent(fmt.Errorf("amqpsink: event %s: its properties and headers take about %d bytes, over the frame size %d", msgs[i].ID, n, sess.frame)))
			continue
		}
		dc, err := sess.ch.PublishWithDeferredConfirmWithContext(ctx, s.cfg.Exchange, keys[i], true, false, pubs[i])
		if err != nil {
			plan.Fail(i, s.dropped(sess, msgs[i], err))
			continue
		}
		sent = append(sent, pending{i, dc})
	}
	timer := time.NewTimer(s.cfg.ConfirmTimeout)
	defer timer.Stop()
	for n, p := range sent {
		select {
		case <-p.dc.Done():
		case <-timer.C:
			s.mu.Lock()
			blocked := sess.blocked
			s.mu.Unlock()
			for _, q := range sent[n:] {
				err := s.dropped(sess, msgs[q.i], fmt.Errorf("no confirm within %s", s.cfg.ConfirmTimeout))
				if blocked != "" && !outbox.IsUnavailable(err) {
					// The broker stopped reading: an alarm, not this message.
					err = outbox.Unavailable(fmt.Errorf("%w; the broker has blocked the connection: %s", err, blocked))
				}
				plan.Fail(q.i, err)
			}
			return
		case <-ctx.Done():
			for _, q := range sent[n:] {
				plan.Fail(q.i, fmt.Errorf("amqpsink: event %s: no confirm before ctx ended: %w", msgs[q.i].ID, ctx.Err()))
			}
			return
		}
		if !p.dc.Acked() {
			plan.Fail(p.i, s.dropped(sess, msgs[p.i], errors.New("the broker nacked it")))
			continue
		}
		if r, ok := s.takeReturn(sess, msgs[p.i].ID.String()); ok {
			plan.Fail(p.i, outbox.Permanent(fmt.Errorf("amqpsink: event %s: unroutable: exchange %q returned routing key %q: %d %s",
				msgs[p.i].ID, r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)))
		}
	}
}

// takeReturn drains the session's returns and takes the one of message id, if any.
// The broker sends a message's basic.return before its basic.ack, and the
// connection's reader queues the return before it resolves the confirm: once the
// confirm is done, its return (if any) is in the channel.
func (s *Sink) takeReturn(sess *session, id string) (amqp.Return, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for drained := false; !drained; {
		select {
		case r := <-sess.returns:
			s.returned[r.MessageId] = r
		default:
			drained = true
		}
	}
	r, ok := s.returned[id]
	delete(s.returned, id)
	return r, ok
}

// dropped classifies a failed publish or confirm: the channel or connection closed,
// or a write that failed on the socket (before the reader noticed), means an outage;
// anything else is this message's transient failure.
func (s *Sink) dropped(sess *session, m outbox.Message, err error) error {
	wrapped := fmt.Errorf("amqpsink: event %s: %w", m.ID, err)
	var opErr *net.OpError
	if sess.ch.IsClosed() || sess.conn.IsClosed() || errors.Is(err, amqp.ErrClosed) || errors.As(err, &opErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return outbox.Unavailable(fmt.Errorf("%w (the connection dropped; it is republished)", wrapped))
	}
	return wrapped
}
