// Package kafkasink is an [outbox.Sink] for Apache Kafka, on franz-go's kgo client.
//
// By default its records are what Debezium's outbox event router writes, so a
// consumer written for that router reads them unchanged: the key is the aggregate id,
// the value is the payload (no envelope, byte for byte), a header "id" holds the event
// id, and the topic is "outbox.event.<AggregateType>" (case kept) unless the event's
// Topic or the Topic template says otherwise. The other attributes travel in the
// headers of the shared message format (docs/message-format.md), or in CloudEvents
// binary mode.
//
// The producer is idempotent with acks=all and at most 5 requests in flight per
// broker (franz-go's defaults, which the sink keeps). Records are keyed by aggregate
// id, so one aggregate stays on one partition (murmur2, as the Java client hashes). A
// call produces the next message of every aggregate at once, waits for their
// results, then the next ones: a message whose predecessor failed is never sent.
//
// Durability: a record is acked once every in-sync replica has it. The producer id is
// new for every client: broker-side dedup does not span a relay restart or a rebuilt
// client, so consumers deduplicate by the id header.
//
// On the consuming side, [Runner] feeds a consumer group to package inbox (effects
// once), committing per partition only offsets below which every record is done.
package kafkasink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// DefaultTopic is the topic template of a Config without one: Debezium's default
// route, outbox.event.${routedByValue} by aggregate type.
const DefaultTopic = "outbox.event.{{.AggregateType}}"

// Config configures a [Sink]. Zero fields take the defaults given at each.
type Config struct {
	// Options are the kgo client's options: the seed brokers (required) and any TLS
	// (kgo.DialTLSConfig), SASL (kgo.SASL) or other connection settings. The sink
	// adds its own producer settings after them: acks=all, its partitioner,
	// DeliveryTimeout, and stopping on data loss (then it rebuilds the client). The
	// sink sets no linger (ProducerLinger(0)) before them: a call hands the client a
	// whole wave at once.
	Options []kgo.Opt
	// Topic is a text/template over the [outbox.Message] giving the topic of an event
	// whose Topic is empty; a set Topic is the topic itself. A name Kafka forbids
	// (outside [a-zA-Z0-9._-], over 249 bytes) fails that event permanently. Default
	// [DefaultTopic].
	Topic string
	// Format of the headers: [sinkformat.Outbox] (default, Debezium-compatible) or
	// [sinkformat.CloudEvents].
	Format sinkformat.Format
	// Source is the CloudEvents source attribute. Default [sinkformat.DefaultSource].
	Source string
	// DeliveryTimeout bounds how long the client keeps trying to deliver a record it
	// has not sent yet (kgo.RecordDeliveryTimeout). Default 10s.
	DeliveryTimeout time.Duration
	// AckTimeout bounds the wait for the results of one wave of records; a record
	// still unanswered then (its request was sent, so the client keeps it to retry)
	// fails transiently, or as [outbox.Unavailable] when no broker answers a ping.
	// Default 15s.
	AckTimeout time.Duration
	// PingTimeout bounds the ping that tells an unreachable cluster from a record's
	// own failure. Default 2s.
	PingTimeout time.Duration
	// Logger: default discard.
	Logger *slog.Logger
}

// Sink publishes to Kafka. It is safe for concurrent use; Close it when done.
type Sink struct {
	cfg     Config
	router  *sinkformat.Router
	encoder *sinkformat.Encoder
	parts   *partitioner

	mu     sync.Mutex // serialises rebuilds
	client atomic.Pointer[kgo.Client]
	closed atomic.Bool
	// alone is held shared by every wave in flight and exclusively by a record tried
	// again alone: the client batches the records of concurrent Publish calls together,
	// and a batch shares its fate with every record in it.
	alone sync.RWMutex
}

// New returns a sink producing with a kgo client built from cfg.Options. It does not
// wait for the cluster: the first Publish connects.
func New(cfg *Config) (*Sink, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("kafkasink: %w", err)
	}
	router, err := sinkformat.NewRouter(c.Topic, sinkformat.KafkaTopic)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: Topic: %w", err)
	}
	encoder, err := sinkformat.NewEncoder(sinkformat.Kafka, c.Format, c.Source)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: %w", err)
	}
	s := &Sink{cfg: c, router: router, encoder: encoder, parts: &partitioner{logger: c.Logger}}
	client, err := s.newClient()
	if err != nil {
		return nil, err
	}
	s.client.Store(client)
	return s, nil
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg.Topic = cmp.Or(cfg.Topic, DefaultTopic)
	cfg.DeliveryTimeout = cmp.Or(cfg.DeliveryTimeout, 10*time.Second)
	cfg.AckTimeout = cmp.Or(cfg.AckTimeout, 15*time.Second)
	cfg.PingTimeout = cmp.Or(cfg.PingTimeout, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if len(cfg.Options) == 0 {
		errs = append(errs, errors.New("Options must name the seed brokers (kgo.SeedBrokers)"))
	}
	for name, d := range map[string]time.Duration{"DeliveryTimeout": cfg.DeliveryTimeout, "AckTimeout": cfg.AckTimeout, "PingTimeout": cfg.PingTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, d))
		}
	}
	return cfg, errors.Join(errs...)
}

func (s *Sink) newClient() (*kgo.Client, error) {
	// No linger (franz-go's default is 10ms): a call hands over a whole wave, then
	// waits for it. Options may set one.
	opts := append([]kgo.Opt{kgo.ProducerLinger(0)}, s.cfg.Options...)
	opts = append(opts,
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(s.parts),
		kgo.RecordDeliveryTimeout(s.cfg.DeliveryTimeout),
		// A sequence or epoch error fails the records instead of resetting the
		// sequence in place: the sink rebuilds the client and the relay republishes.
		kgo.StopProducerOnDataLossDetected(),
	)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: new client: %w", err)
	}
	return client, nil
}

// Close closes the client; records not yet acked fail.
func (s *Sink) Close() {
	s.closed.Store(true)
	s.client.Load().Close()
}

// result is one record's outcome.
type result struct {
	i   int
	err error
}

// Publish produces msgs wave by wave and returns one result per message: nil once the
// cluster acked it, [outbox.Permanent] for a record too large, a forbidden or invalid
// topic, or a refused authorization, [outbox.Unavailable] when no broker can be
// reached (or the producer had to be rebuilt), ctx's error when it ends first, a
// plain error for other failures, and [outbox.ErrNotSent] after an earlier message of
// the same aggregate failed.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	plan := sinkformat.NewPlan(ctx, msgs)
	records := make([]*kgo.Record, len(msgs))
	for i := range msgs {
		r, err := s.record(&msgs[i])
		if err != nil {
			plan.Fail(i, outbox.Permanent(fmt.Errorf("kafkasink: event %s: %w", msgs[i].ID, err)))
			continue
		}
		records[i] = r
	}
	for wave := plan.Next(); wave != nil; wave = plan.Next() {
		if err := ctx.Err(); err != nil {
			plan.FailRest(err)
			break
		}
		s.produce(ctx, msgs, records, wave, plan)
	}
	return plan.Errors()
}

// record builds the Kafka record of m. The value is a copy: a record the client
// still retries after Publish returned keeps nothing of the caller's.
func (s *Sink) record(m *outbox.Message) (*kgo.Record, error) {
	topic, err := s.router.Route(m)
	if err != nil {
		return nil, err
	}
	headers, err := s.encoder.Headers(*m)
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Topic: topic, Key: []byte(m.AggregateID), Value: slices.Clone(m.Payload), Headers: make([]kgo.RecordHeader, len(headers))}
	for i, h := range headers {
		r.Headers[i] = kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)}
	}
	return r, nil
}

// produce sends one wave and waits for its results. A record the broker refused as
// too large is tried again alone — with no other record in flight through the sink,
// since the client batches the records of concurrent calls together and a batch shares
// its fate with every record in it — and only then judged.
func (s *Sink) produce(ctx context.Context, msgs []outbox.Message, records []*kgo.Record, wave []int, plan *sinkformat.Plan) {
	client := s.client.Load()
	j := &judge{s: s, ctx: ctx, client: client}
	s.alone.RLock()
	results := s.send(ctx, client, records, wave)
	s.alone.RUnlock()
	var tooLarge []int
	var rebuild bool
	for _, r := range results {
		switch {
		case r.err == nil:
		case errors.Is(r.err, kerr.MessageTooLarge):
			tooLarge = append(tooLarge, r.i)
		default:
			err := j.classify(msgs[r.i], r.err)
			rebuild = rebuild || needsRebuild(r.err)
			plan.Fail(r.i, err)
		}
	}
	for _, i := range tooLarge {
		s.alone.Lock()
		results := s.send(ctx, client, records, []int{i})
		s.alone.Unlock()
		for _, r := range results {
			if r.err != nil {
				plan.Fail(i, j.classify(msgs[i], r.err))
			}
		}
	}
	if rebuild {
		s.rebuild(client)
	}
}

// send produces the records of wave and returns their results, in any order; those
// unanswered within AckTimeout or before ctx ends fail with errNoAck or ctx's error.
func (s *Sink) send(ctx context.Context, client *kgo.Client, records []*kgo.Record, wave []int) []result {
	done := make(chan result, len(wave))
	// The records outlive ctx: once a request is sent, the idempotent client must see
	// it through. Publish stops waiting when ctx ends.
	produceCtx := context.WithoutCancel(ctx)
	for _, i := range wave {
		client.Produce(produceCtx, records[i], func(_ *kgo.Record, err error) { done <- result{i, err} })
	}
	out := make([]result, 0, len(wave))
	answered := make(map[int]bool, len(wave))
	timer := time.NewTimer(s.cfg.AckTimeout)
	defer timer.Stop()
	for len(out) < len(wave) {
		select {
		case r := <-done:
			out = append(out, r)
			answered[r.i] = true
		case <-timer.C:
			return unanswered(out, wave, answered, errNoAck)
		case <-ctx.Done():
			return unanswered(out, wave, answered, ctx.Err())
		}
	}
	return out
}

var errNoAck = errors.New("no result within the ack timeout")

func unanswered(out []result, wave []int, answered map[int]bool, err error) []result {
	for _, i := range wave {
		if !answered[i] {
			out = append(out, result{i, err})
		}
	}
	return out
}

// judge classifies the errors of one wave; it pings the cluster at most once.
type judge struct {
	s      *Sink
	ctx    context.Context
	client *kgo.Client
	pinged bool
	perr   error
}

// ping reports whether a broker answers.
func (j *judge) ping() error {
	if !j.pinged {
		ctx, cancel := context.WithTimeout(j.ctx, j.s.cfg.PingTimeout)
		defer cancel()
		j.perr, j.pinged = j.client.Ping(ctx), true
	}
	return j.perr
}

// classify maps a record's error to the failure classes of [outbox.Sink].
func (j *judge) classify(m outbox.Message, err error) error {
	ctx := j.ctx
	wrapped := fmt.Errorf("kafkasink: produce event %s: %w", m.ID, err)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return wrapped
	case isPermanent(err):
		return outbox.Permanent(wrapped)
	case needsRebuild(err), errors.Is(err, kgo.ErrClientClosed), isNetwork(err),
		errors.Is(err, kerr.LeaderNotAvailable), errors.Is(err, kerr.NotLeaderForPartition),
		errors.Is(err, kerr.BrokerNotAvailable), errors.Is(err, kerr.NetworkException),
		errors.Is(err, kerr.NotEnoughReplicas), errors.Is(err, kerr.NotEnoughReplicasAfterAppend):
		return outbox.Unavailable(wrapped)
	case errors.Is(err, errNoAck), errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kerr.RequestTimedOut):
		if perr := j.ping(); perr != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %w", wrapped, ctx.Err())
			}
			return outbox.Unavailable(fmt.Errorf("%w; no broker answers a ping: %w", wrapped, perr))
		}
		return wrapped // the cluster is up: the result of this record is unknown, retry it
	}
	return wrapped
}

// isPermanent: retrying the same record cannot succeed.
func isPermanent(err error) bool {
	for _, e := range []error{
		kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidTopicException, kerr.TopicAuthorizationFailed,
		kerr.ClusterAuthorizationFailed, kerr.InvalidRecord, kerr.CorruptMessage, kerr.InvalidRequiredAcks,
		kerr.UnsupportedForMessageFormat, kerr.PolicyViolation,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// needsRebuild: the producer's idempotence state is broken; a new client (a new
// producer id) starts afresh, and the relay republishes from the database.
func needsRebuild(err error) bool {
	return errors.Is(err, kerr.OutOfOrderSequenceNumber) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.UnknownProducerID) || errors.Is(err, kerr.InvalidProducerIDMapping)
}

func isNetwork(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// rebuild replaces client with a new one, unless another call did already.
func (s *Sink) rebuild(old *kgo.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() || s.client.Load() != old {
		return
	}
	client, err := s.newClient()
	if err != nil {
		s.cfg.Logger.Error("kafkasink: rebuild the client", slog.Any("error", err))
		return
	}
	s.client.Store(client)
	s.cfg.Logger.Warn("kafkasink: rebuilt the client after a producer sequence or epoch error; the relay republishes what was not acked")
	go old.Close() // fails what it still holds: those calls see an outage and retry
}
