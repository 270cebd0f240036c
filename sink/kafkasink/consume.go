package kafkasink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// RunnerConfig configures a [Runner]. Zero fields take the defaults given at each.
type RunnerConfig struct {
	// Seeds are the brokers to bootstrap from (host:port). Required.
	Seeds []string
	// Group is the consumer group. Required.
	Group string
	// Topics are the topics to consume. Required.
	Topics []string
	// Workers is how many records are processed at once, 1 to 1024. Records of one
	// aggregate (the record key is the aggregate id) always go to the same worker, one
	// at a time, in offset order; different aggregates go in parallel. Default 8.
	Workers int
	// RetryDelay is how long a worker waits before processing a record again after
	// Process returned an error. Kafka has no per-record nak: the record is retried in
	// place, and the offsets after it are not committed meanwhile. Default 1 s.
	RetryDelay time.Duration
	// CommitInterval is how often completed offsets are committed. Default 1 s.
	CommitInterval time.Duration
	// ClientOpts are more options for the client (TLS, SASL, …). The runner sets
	// the group, the topics, DisableAutoCommit and the revoke and lost callbacks itself.
	ClientOpts []kgo.Opt
	// Logger receives a line per record that cannot be processed (skipped) and per
	// failed commit. Default: discard.
	Logger *slog.Logger
}

// Runner feeds a Kafka consumer group to [inbox.Consumer.Process]. It commits, per
// partition, only the offset below which every record is done (applied, duplicate,
// stale, parked, quarantined, or undecodable and skipped): never past a record still
// retrying, so a crash or a rebalance redelivers from that record — the records after
// it that were already done come again and are duplicates to the inbox.
//
// Across instances: a partition is consumed by one member of the group at a time, and
// the sink keys records by aggregate id, so an aggregate's events stay in order across
// instances too.
type Runner struct {
	db      outbox.TxBeginner
	inbox   *inbox.Consumer
	handler inbox.Handler
	cfg     RunnerConfig
	logger  *slog.Logger

	mu    sync.Mutex
	parts map[topicPartition]*partition
}

type topicPartition struct {
	topic     string
	partition int32
}

// partition tracks the offsets of one partition: those handed to workers and not done.
type partition struct {
	pending   map[int64]bool
	next      int64 // one past the highest offset seen
	epoch     int32
	committed int64
}

// committable is the offset to commit: the lowest still pending, or the next.
func (p *partition) committable() int64 {
	low := p.next
	for o := range p.pending {
		low = min(low, o)
	}
	return low
}

// NewRunner returns a Runner of cfg's group into c with h, on db.
func NewRunner(db outbox.TxBeginner, c *inbox.Consumer, h inbox.Handler, cfg *RunnerConfig) (*Runner, error) {
	switch {
	case db == nil:
		return nil, errors.New("kafkasink: NewRunner: db is nil")
	case c == nil:
		return nil, errors.New("kafkasink: NewRunner: the inbox consumer is nil")
	case h == nil:
		return nil, errors.New("kafkasink: NewRunner: the handler is nil")
	case cfg == nil:
		return nil, errors.New("kafkasink: NewRunner: RunnerConfig is nil: Seeds, Group and Topics are required")
	}
	rc := *cfg
	switch {
	case len(rc.Seeds) == 0:
		return nil, errors.New("kafkasink: RunnerConfig.Seeds is empty")
	case rc.Group == "":
		return nil, errors.New("kafkasink: RunnerConfig.Group is empty")
	case len(rc.Topics) == 0:
		return nil, errors.New("kafkasink: RunnerConfig.Topics is empty")
	}
	rc.Workers = cmp.Or(rc.Workers, 8)
	if rc.Workers < 1 || rc.Workers > 1024 {
		return nil, fmt.Errorf("kafkasink: RunnerConfig.Workers is %d; it must be between 1 and 1024", rc.Workers)
	}
	rc.RetryDelay = cmp.Or(rc.RetryDelay, time.Second)
	rc.CommitInterval = cmp.Or(rc.CommitInterval, time.Second)
	if rc.RetryDelay < 0 || rc.CommitInterval < 0 {
		return nil, errors.New("kafkasink: RunnerConfig.RetryDelay and CommitInterval must not be negative")
	}
	logger := rc.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{db: db, inbox: c, handler: h, cfg: rc, logger: logger, parts: map[topicPartition]*partition{}}, nil
}

type job struct {
	rec *kgo.Record
	msg outbox.Message
}

// Run consumes until ctx is done, then lets the workers stop (a record being retried is
// left undone), commits what is done, leaves the group and returns nil. It returns an
// error when the client cannot be created.
func (r *Runner) Run(ctx context.Context) error {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(r.cfg.Seeds...), kgo.ConsumerGroup(r.cfg.Group), kgo.ConsumeTopics(r.cfg.Topics...),
		kgo.DisableAutoCommit(), kgo.OnPartitionsRevoked(r.revoked), kgo.OnPartitionsLost(r.lost),
	}, r.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafkasink: runner client: %w", err)
	}
	defer cl.Close()

	queues := make([]chan job, r.cfg.Workers)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan job, 16)
		wg.Go(func() { r.work(ctx, queues[i]) })
	}
	commitCtx, stopCommits := context.WithCancel(context.WithoutCancel(ctx))
	var committer sync.WaitGroup
	committer.Go(func() {
		t := time.NewTicker(r.cfg.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-commitCtx.Done():
				return
			case <-t.C:
				r.commit(commitCtx, cl)
			}
		}
	})
	defer func() {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
		stopCommits()
		committer.Wait()
		final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		r.commit(final, cl)
		_ = cl.LeaveGroupContext(final)
	}()

	for {
		fetches := cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			r.logger.WarnContext(ctx, "fetch failed", slog.String("topic", topic), slog.Int("partition", int(p)), slog.String("error", err.Error()))
		})
		stopped := false
		fetches.EachRecord(func(rec *kgo.Record) {
			if stopped {
				return
			}
			r.track(rec)
			msg, err := decodeRecord(rec)
			if err != nil {
				r.logger.WarnContext(ctx, "skipped a record that cannot be decoded", slog.String("topic", rec.Topic),
					slog.Int("partition", int(rec.Partition)), slog.Int64("offset", rec.Offset), slog.String("error", err.Error()))
				r.done(rec)
				return
			}
			select {
			case queues[inbox.Shard(msg.AggregateType, msg.AggregateID, len(queues))] <- job{rec, msg}:
			case <-ctx.Done():
				stopped = true
			}
		})
		if stopped {
			return nil
		}
	}
}

// work processes its share of the aggregates, one record at a time; a failed record is
// retried in place until it is done or ctx ends (then it stays undone, uncommitted).
func (r *Runner) work(ctx context.Context, q <-chan job) {
	for j := range q {
		for ctx.Err() == nil {
			_, err := r.inbox.Process(ctx, r.db, j.msg, r.handler)
			if err == nil || errors.Is(err, inbox.ErrInvalidMessage) {
				if err != nil {
					r.logger.WarnContext(ctx, "skipped a record that cannot be processed", slog.Int64("offset", j.rec.Offset), slog.String("error", err.Error()))
				}
				r.done(j.rec)
				break
			}
			t := time.NewTimer(r.cfg.RetryDelay)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

func (r *Runner) track(rec *kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := topicPartition{rec.Topic, rec.Partition}
	p := r.parts[k]
	if p == nil {
		p = &partition{pending: map[int64]bool{}, next: rec.Offset, committed: -1}
		r.parts[k] = p
	}
	p.pending[rec.Offset] = true
	p.next = max(p.next, rec.Offset+1)
	p.epoch = rec.LeaderEpoch
}

func (r *Runner) done(rec *kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.parts[topicPartition{rec.Topic, rec.Partition}]; p != nil {
		delete(p.pending, rec.Offset)
	}
}

// commit commits, for every tracked partition, the offset below which all is done, when
// it moved since the last commit.
func (r *Runner) commit(ctx context.Context, cl *kgo.Client) {
	r.commitOnly(ctx, cl, nil)
}

func (r *Runner) commitOnly(ctx context.Context, cl *kgo.Client, only map[string][]int32) {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	r.mu.Lock()
	for k, p := range r.parts {
		if only != nil && !slices.Contains(only[k.topic], k.partition) {
			continue
		}
		if o := p.committable(); o > p.committed {
			if offsets[k.topic] == nil {
				offsets[k.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[k.topic][k.partition] = kgo.EpochOffset{Epoch: p.epoch, Offset: o}
		}
	}
	r.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			r.logger.WarnContext(ctx, "commit failed", slog.String("error", err.Error()))
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for topic, ps := range offsets {
			for part, eo := range ps {
				if p := r.parts[topicPartition{topic, part}]; p != nil {
					p.committed = max(p.committed, eo.Offset)
				}
			}
		}
	})
}

// revoked commits what is done of the revoked partitions and forgets them: their new
// owner starts from there (records done after this are duplicates to it).
func (r *Runner) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	r.commitOnly(ctx, cl, revoked)
	r.lost(ctx, cl, revoked)
}

// lost forgets partitions taken away without a chance to commit.
func (r *Runner) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for topic, ps := range lost {
		for _, p := range ps {
			delete(r.parts, topicPartition{topic, p})
		}
	}
}

// decodeRecord reads the shared message format from a record.
func decodeRecord(rec *kgo.Record) (outbox.Message, error) {
	hs := make([]sinkformat.Header, len(rec.Headers))
	for i, h := range rec.Headers {
		hs[i] = sinkformat.Header{Name: h.Key, Value: string(h.Value)}
	}
	msg, err := sinkformat.Decode(sinkformat.Kafka, hs, rec.Value)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("kafkasink: decode record: %w", err)
	}
	return msg, nil
}
