// Package redissink is an [outbox.Sink] for Redis Streams, on go-redis.
//
// Each event is one XADD to a stream named by a template: an entry whose fields are
// the headers of the shared message format (docs/message-format.md) — "id" (the event
// id) first, in both formats — and last "payload", the payload byte for byte. Redis
// assigns the entry id. MaxLen trims each stream to about that many entries (MAXLEN ~).
// A call sends the next message of every aggregate in one pipeline, reads the
// replies, then sends the next ones, so a message whose predecessor failed is never
// sent.
//
// Durability: Redis acknowledges an XADD once it is in memory. The entry survives a
// crash only with AOF and appendfsync always (everysec can lose the last second, no
// AOF loses everything since the last snapshot), and replication is asynchronous: a
// failover can lose acked entries. Redis 7.0 has no idempotent XADD, so an event
// republished after a lost reply is stored twice: consumers deduplicate by the id
// field (an inbox does), or set Dedup, which runs XADD in a small Lua script that
// first checks a key per event id (kept for DedupWindow) and skips a duplicate.
//
// Create the client with ContextTimeoutEnabled: true, so that a call's ctx deadline
// bounds its network reads and writes.
package redissink

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// DefaultStream is the stream key template of a Config without one.
const DefaultStream = "outbox.event.{{.AggregateType}}"

// DefaultDedupWindow is how long a Dedup key lives in a Config without one.
const DefaultDedupWindow = 24 * time.Hour

// Config configures a [Sink]. Zero fields take the defaults given at each.
type Config struct {
	// Stream is a text/template over the [outbox.Message] giving the key of the stream
	// an event whose Topic is empty is added to; a set Topic is the key itself. A key
	// over 1,024 bytes or with control characters fails its event permanently.
	// Default [DefaultStream].
	Stream string
	// MaxLen trims each stream to about this many entries on every add
	// (XADD MAXLEN ~). Default 0: no trimming.
	MaxLen int64
	// Dedup runs each XADD in a Lua script that skips an event whose id it has seen
	// within DedupWindow (a key "<stream>:outbox-dedup:<id>", hash-tagged with the
	// stream's key so that both share a cluster slot), so a republish is stored once.
	// It costs a key per event and a script per add (bench/RESULTS.md measures it).
	// Default false.
	Dedup bool
	// DedupWindow is how long a Dedup key lives. Default [DefaultDedupWindow].
	DedupWindow time.Duration
	// Format of the fields: [sinkformat.Outbox] (default) or [sinkformat.CloudEvents].
	Format sinkformat.Format
	// Source is the CloudEvents source attribute. Default [sinkformat.DefaultSource].
	Source string
	// Logger: default discard.
	Logger *slog.Logger
}

// Sink adds events to Redis Streams. It is safe for concurrent use.
type Sink struct {
	client  redis.UniversalClient
	cfg     Config
	router  *sinkformat.Router
	encoder *sinkformat.Encoder
}

//go:embed dedup.lua
var dedupLua string

// dedupScript adds an entry unless its event's dedup key exists.
var dedupScript = redis.NewScript(dedupLua)

// New returns a sink adding to streams through client; it connects to nothing.
func New(client redis.UniversalClient, cfg *Config) (*Sink, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("redissink: %w", err)
	}
	if client == nil {
		return nil, errors.New("redissink: a client is required")
	}
	router, err := sinkformat.NewRouter(c.Stream, sinkformat.RedisKey)
	if err != nil {
		return nil, fmt.Errorf("redissink: Stream: %w", err)
	}
	encoder, err := sinkformat.NewEncoder(sinkformat.Redis, c.Format, c.Source)
	if err != nil {
		return nil, fmt.Errorf("redissink: %w", err)
	}
	return &Sink{client: client, cfg: c, router: router, encoder: encoder}, nil
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg.Stream = cmp.Or(cfg.Stream, DefaultStream)
	cfg.DedupWindow = cmp.Or(cfg.DedupWindow, DefaultDedupWindow)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.MaxLen < 0 {
		errs = append(errs, fmt.Errorf("MaxLen must be 0 (no trimming) or positive, got %d", cfg.MaxLen))
	}
	if cfg.DedupWindow < time.Millisecond {
		errs = append(errs, fmt.Errorf("DedupWindow must be at least 1ms, got %s", cfg.DedupWindow))
	}
	return cfg, errors.Join(errs...)
}

// entry is one message's stream key and fields.
type entry struct {
	stream string
	values []any // field, value, …
}

// Publish adds msgs wave by wave and returns one result per message: nil once Redis
// acked the add (or, with Dedup, found the event already added), [outbox.Permanent]
// for a key Redis refuses (WRONGTYPE: it holds another type) or a message that cannot
// be sent, [outbox.Unavailable] when Redis cannot be reached, is loading, read-only
// or out of memory, ctx's error when it ends first, and [outbox.ErrNotSent] after an
// earlier message of the same aggregate failed.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	plan := sinkformat.NewPlan(ctx, msgs)
	entries := make([]entry, len(msgs))
	for i := range msgs {
		e, err := s.entry(&msgs[i])
		if err != nil {
			plan.Fail(i, outbox.Permanent(fmt.Errorf("redissink: event %s: %w", msgs[i].ID, err)))
			continue
		}
		entries[i] = e
	}
	for wave := plan.Next(); wave != nil; wave = plan.Next() {
		if err := ctx.Err(); err != nil {
			plan.FailRest(err)
			break
		}
		s.sendWave(ctx, msgs, entries, wave, plan)
	}
	return plan.Errors()
}

// entry builds m's stream key and fields.
func (s *Sink) entry(m *outbox.Message) (entry, error) {
	stream, err := s.router.Route(m)
	if err != nil {
		return entry{}, err
	}
	headers, err := s.encoder.Headers(*m)
	if err != nil {
		return entry{}, err
	}
	values := make([]any, 0, 2*len(headers)+4)
	if headers[0].Name != sinkformat.HeaderID {
		values = append(values, sinkformat.HeaderID, m.ID.String()) // CloudEvents: the id field too
	}
	for _, h := range headers {
		values = append(values, h.Name, h.Value)
	}
	values = append(values, "payload", m.Payload)
	return entry{stream: stream, values: values}, nil
}

// sendWave adds one wave in one pipeline and records each result.
func (s *Sink) sendWave(ctx context.Context, msgs []outbox.Message, entries []entry, wave []int, plan *sinkformat.Plan) {
	cmds := make([]redis.Cmder, len(wave))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n, i := range wave {
			cmds[n] = s.add(ctx, p, msgs[i].ID.String(), entries[i])
		}
		return nil
	})
	var reload []int // positions in wave whose script Redis did not have
	for n, i := range wave {
		err := cmds[n].Err()
		if s.cfg.Dedup && err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			reload = append(reload, n)
			continue
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			plan.Fail(i, s.classify(ctx, msgs[i], entries[i].stream, err))
		}
	}
	if len(reload) > 0 {
		s.retryWithScript(ctx, msgs, entries, wave, reload, plan)
	}
}

// retryWithScript loads the script (a restarted or flushed server lost it) and runs
// again the adds that found it missing; they were not applied.
func (s *Sink) retryWithScript(ctx context.Context, msgs []outbox.Message, entries []entry, wave, reload []int, plan *sinkformat.Plan) {
	if err := dedupScript.Load(ctx, s.client).Err(); err != nil {
		for _, n := range reload {
			plan.Fail(wave[n], s.classify(ctx, msgs[wave[n]], entries[wave[n]].stream, err))
		}
		return
	}
	for _, n := range reload {
		i := wave[n]
		if err := s.add(ctx, s.client, msgs[i].ID.String(), entries[i]).Err(); err != nil && !errors.Is(err, redis.Nil) {
			plan.Fail(i, s.classify(ctx, msgs[i], entries[i].stream, err))
		}
	}
}

// adder is a client or a pipeline.
type adder interface {
	redis.Scripter
	XAdd(ctx context.Context, a *redis.XAddArgs) *redis.StringCmd
}

// add queues (or runs) one message's XADD, or its dedup script.
func (s *Sink) add(ctx context.Context, c adder, id string, e entry) redis.Cmder {
	if !s.cfg.Dedup {
		return c.XAdd(ctx, &redis.XAddArgs{Stream: e.stream, MaxLen: s.cfg.MaxLen, Approx: s.cfg.MaxLen > 0, Values: e.values})
	}
	args := make([]any, 0, len(e.values)+2)
	args = append(args, s.cfg.DedupWindow.Milliseconds(), s.cfg.MaxLen)
	args = append(args, e.values...)
	return dedupScript.EvalSha(ctx, c, []string{e.stream, dedupKey(e.stream, id)}, args...)
}

// dedupKey is the key that marks event id as added to stream, in stream's cluster
// slot: with stream's hash tag when it has one, else with stream as the tag.
func dedupKey(stream, id string) string {
	tag := stream
	if open := strings.IndexByte(stream, '{'); open >= 0 {
		if end := strings.IndexByte(stream[open+1:], '}'); end > 0 {
			tag = stream[open+1 : open+1+end]
		}
	}
	return "{" + tag + "}:outbox-dedup:" + id
}

// classify maps a command's error to the failure classes of [outbox.Sink].
func (s *Sink) classify(ctx context.Context, m outbox.Message, stream string, err error) error {
	wrapped := fmt.Errorf("redissink: event %s: add to stream %q: %w", m.ID, stream, err)
	var netErr net.Error
	var opErr *net.OpError
	msg := err.Error()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", wrapped, ctx.Err())
	case strings.HasPrefix(msg, "WRONGTYPE"), strings.HasPrefix(msg, "CROSSSLOT"):
		return outbox.Permanent(wrapped)
	case strings.HasPrefix(msg, "OOM"), strings.HasPrefix(msg, "READONLY"), strings.HasPrefix(msg, "LOADING"),
		strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "CLUSTERDOWN"), strings.HasPrefix(msg, "NOAUTH"),
		strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "BUSY"):
		return outbox.Unavailable(wrapped)
	case errors.As(err, &netErr) && netErr.Timeout():
		return wrapped // no reply in time: the add may have happened; the retry may store it twice
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.As(err, &opErr):
		return outbox.Unavailable(wrapped)
	}
	return wrapped
}
