package relay

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/outboxkit/outbox/internal/slogdefault"
	"github.com/outboxkit/outbox/internal/sqlq"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// Mode says whether the relay keeps per-aggregate order.
type Mode string

const (
	// Ordered publishes the events of one aggregate in write order: an event is
	// published only when every earlier event of its aggregate is published (or
	// discarded, or dead under PublishPastDead). The default.
	Ordered Mode = "ordered"
	// Unordered publishes the oldest available events, whatever their aggregate, for
	// maximum throughput.
	Unordered Mode = "unordered"
)

// RetentionMode says what happens to published events.
type RetentionMode string

const (
	// KeepThenDelete keeps published events for Retention.Keep, then deletes them. The default.
	KeepThenDelete RetentionMode = "keep-then-delete"
	// DeleteOnPublish deletes an event in the same transaction that records it published.
	DeleteOnPublish RetentionMode = "delete-on-publish"
	// KeepThenArchive keeps published events for Retention.Keep, then moves a slim row
	// (id, type, aggregate, times) to events_archive and deletes the event.
	KeepThenArchive RetentionMode = "keep-then-archive"
)

// Retention configures what happens to published events. Dead events are never purged.
type Retention struct {
	// Mode: default [DefaultRetentionMode] (KeepThenDelete).
	Mode RetentionMode
	// Keep is how long published events are kept. Default [DefaultRetentionKeep] (7 days).
	Keep time.Duration
	// Interval between purge runs. Default [DefaultRetentionInterval] (1 minute).
	Interval time.Duration
	// BatchSize is the seq range one purge statement covers. Default
	// [DefaultRetentionBatchSize] (1000).
	BatchSize int
}

// Config configures a [Relay]. Nil or zero fields mean the defaults given at each field.
type Config struct {
	// Schema holding the outbox tables. Default "outbox".
	Schema string
	// Mode: default [DefaultMode] (Ordered). Every relay of a schema must use the same mode
	// (recorded in relay_config; a relay with another refuses to start).
	Mode Mode
	// Partitions is the number of relay partitions (recorded in relay_config like
	// Mode). Default [DefaultPartitions] (16), at most 4096.
	Partitions int
	// BatchSize is the most events claimed by one batch (heads, in ordered mode).
	// Default [DefaultBatchSize] (100), between 1 and 10000.
	BatchSize int
	// MaxPerAggregate is, in ordered mode, the most events of one aggregate in a batch;
	// they are handed to the sink in order. Default [DefaultMaxPerAggregate] (10).
	MaxPerAggregate int
	// MaxBatchEvents is, in ordered mode, the most events in a batch: a batch of n
	// heads (at most MaxBatchEvents) holds at most MaxBatchEvents / n events of each
	// aggregate (rounded down), so the cut is fair and the relay's memory stays bounded
	// whatever BatchSize × MaxPerAggregate. Default BatchSize × MaxPerAggregate, at most
	// 10000; between 1 and 100000.
	MaxBatchEvents int
	// BatchTimeout is the time budget of one batch: claim, publish and mark. A publish
	// still running then is abandoned (its events are published again later). Default
	// [DefaultBatchTimeout] (30s).
	BatchTimeout time.Duration
	// FallbackPollInterval is how long an idle relay waits before looking for work
	// again while its wake-up listener works (notifications wake it sooner). It covers
	// lost notifications. Default [DefaultFallbackPollInterval] (5s).
	FallbackPollInterval time.Duration
	// PollInterval is how long an idle relay waits before looking for work again when no
	// listener works (Wakeup is WakeupPoll, the listener is reconnecting, or its
	// self-test failed).
	// Default [DefaultPollInterval] (500ms).
	PollInterval time.Duration
	// ClaimCooldown is the least time between the start of a claim that found events but
	// less than a full batch (the relay had caught up) and the start of the relay's next
	// claim, unless that claim follows a full one. Under a steady trickle the wake-ups
	// that come sooner gather into one claim instead of a write transaction each: each
	// of the relay's workers claims at most once per ClaimCooldown, so the relay's cost
	// to the producers' commits stops growing with the rate of wake-ups (several
	// Notifiers, the per-commit NOTIFY trigger). A backlog is claimed back to back, and
	// an event after a quiet spell is claimed at once; no event waits for the cooldown
	// longer than ClaimCooldown. Default [DefaultClaimCooldown] (5ms, the Notifier's
	// coalescing window); negative: none.
	ClaimCooldown time.Duration
	// Wakeup says how an idle relay learns of new events sooner than PollInterval.
	// WakeupListen ([DefaultWakeup]) LISTENs, on one dedicated connection, for the wake-ups
	// sent by outbox.Notifier and the opt-in trigger (InstallNotifyTrigger), and falls
	// back to polling alone, with a warning, when its start-up self-test finds that
	// notifications do not arrive (a transaction-pooling PgBouncer). WakeupPoll only polls.
	Wakeup Wakeup
	// Concurrency is the number of batches in flight at once, each holding a pool
	// connection while its sink publishes; at most the pool's MaxConns. Default: the
	// mode's default ([DefaultOrderedConcurrency], [DefaultUnorderedConcurrency]: 2)
	// among all the relays of the schema, at least 1 each — a relay alone runs 2 batches
	// at once (in ordered mode, while one is being published or waits for a slow call,
	// the other claims and publishes other aggregates; the relay's partitions are dealt
	// out among its workers, so two batches never read the same aggregates, ADR 0024;
	// an ordered relay runs the second only while busy — in the last second a claim came
	// back full having cut an aggregate, or from a worker that had not caught up for
	// 100 ms; a batch went on without a slow call; or a probe found a backlog — else one
	// claim takes a trickle's or a followed flood's events from all its partitions, ADR
	// 0035, ADR 0037),
	// relays that find others alive (they announce themselves in relay_members every
	// LeaseTTL/3) run 1 each: many batch transactions at once on a small server lose more
	// than they gain (ADR 0006, ADR 0027). 1 on a pool of fewer than 4 connections (half
	// the pool stays free for retention and for a sink or an application sharing it). A
	// Concurrency you set is per relay.
	Concurrency int
	// PublishCalls is the most Publish calls one batch makes at once. The batch's
	// aggregates are dealt out among them, each aggregate's messages in one call and in
	// order, so a message that hangs, or a sink that publishes one message after
	// another, holds up only the aggregates of its own call. 1: one call per batch.
	// Default [DefaultPublishCalls] (32), at most 1024.
	PublishCalls int
	// SlowPublish is how long a batch waits, at the least, for its slowest Publish calls
	// once others have returned: after SlowPublish, or four times as long as the first
	// call took, whichever is longer, the batch commits what returned, and the
	// aggregates of the calls still running wait for them (their events held in flight,
	// settled when the calls return or BatchTimeout ends them) while the relay goes on
	// with every other aggregate. A batch none of whose calls has returned goes on
	// without them after SlowPublish or four times as long as the sink's calls usually
	// take, whichever is longer — one such batch per worker at a time (ADR 0033).
	// Default [DefaultSlowPublish] (50ms).
	SlowPublish time.Duration
	// SynchronousCommit makes a batch's commit wait until the database has flushed it to
	// disk. Default false: the relay's transactions run with synchronous_commit off, so a
	// database crash can lose the last moment's marks (at most about three times the
	// server's wal_writer_delay); those events are published again after the restart —
	// duplicates, as after any crash, never a loss. A synchronous commit costs every
	// batch a WAL flush, which on a busy server competes with the producers' own.
	SynchronousCommit bool
	// MaxAttempts is the attempt budget of an event failing transiently; it is dead
	// when spent. Default [DefaultMaxAttempts] (10). A permanent failure ([outbox.Permanent]) is dead at once.
	MaxAttempts int
	// RetryBaseDelay is the backoff after the first failed attempt; each further
	// attempt doubles it, up to RetryMaxDelay, with equal jitter (the delay is between
	// half and all of it). Default [DefaultRetryBaseDelay] (1s).
	RetryBaseDelay time.Duration
	// RetryMaxDelay caps the backoff. Default [DefaultRetryMaxDelay] (10 minutes).
	RetryMaxDelay time.Duration
	// PublishPastDead lists aggregate types whose dead events do not hold the rest of
	// their aggregate: later events are published past the hole. Default: none — a dead
	// event holds its aggregate until it is replayed or discarded.
	PublishPastDead []string
	// TypeWeights weighs the aggregate types' shares of an ordered claim's heads (its
	// BatchSize): while several types have more claimable aggregates than their share, a
	// type of weight 3 gets three times the heads of a type of weight 1. Types not named
	// weigh 1. Whatever the weights, every type with a claimable aggregate gets at least
	// one head per claim (while there are no more such types than heads; else the claim
	// takes each one's first in turn), and a share a type leaves unused goes to the types
	// that need it (ADR 0034). Default: none, every type weighs 1 (equal shares).
	TypeWeights map[string]int
	// IsolatedTypes (ordered mode) are aggregate types claimed by workers of their own
	// (ADR 0039): of the relay's Concurrency workers, the last claims every other type
	// and the rest these types, each lane over all the relay's partitions. A flood of an
	// isolated type then never delays the others' claims: their events wait for no
	// claim or commit of it, only for the database's CPU. Name the types that flood (a
	// bulk import, a backfill). Needs a Concurrency of 2 or more. Default: none, every
	// worker claims every type.
	IsolatedTypes []string
	// TypeRates (ordered mode) bounds how many events of each named aggregate type the
	// schema's relays claim a second, together: each live relay claims its equal part
	// (ADR 0040). A type over its rate waits in the table; the other types' claims go on.
	// Name a type whose flood would take the database's CPU from the others (a bulk
	// import, a backfill) or whose consumer takes only so many (a partner's webhook).
	// Bursts are bounded: a claim takes no more heads of the type than a tenth of a
	// second of its rate pays for (at least one, each with up to MaxPerAggregate events),
	// and the type waits out what it took beyond that. Default: none, no type is limited.
	TypeRates map[string]float64
	// BreakerMinAggregates: a batch in which nothing succeeded and failures span at
	// least this many distinct aggregates means the sink is down (as does any error
	// wrapped with outbox.Unavailable). Default [DefaultBreakerMinAggregates] (3).
	BreakerMinAggregates int
	// BreakerInitialDelay is how long the breaker stays open before the first probe;
	// it doubles after each failed probe up to BreakerMaxDelay. Default
	// [DefaultBreakerInitialDelay] (1s).
	BreakerInitialDelay time.Duration
	// BreakerMaxDelay caps the breaker's wait between probes. Default
	// [DefaultBreakerMaxDelay] (30s).
	BreakerMaxDelay time.Duration
	// ShutdownTimeout bounds how long Run waits for in-flight batches after its
	// context is cancelled; then their transactions are abandoned (rolled back), so
	// their events stay pending. Default [DefaultShutdownTimeout] (10s).
	ShutdownTimeout time.Duration
	// LeaseTTL is how long a relay partition's lease lasts without renewal (ordered
	// mode). Renewed every LeaseTTL/3; after a relay dies, its partitions are taken over
	// within about LeaseTTL. Default [DefaultLeaseTTL] (10s).
	LeaseTTL time.Duration
	// Retention of published events.
	Retention Retention
	// Observer, when set, is told what each settled batch did (for metrics: per event
	// type outcomes, batch duration, commit → acknowledgement latency). Default nil.
	Observer Observer
	// Logger receives the relay's warnings (a failing batch, a dead event, a lost lease, the
	// sink down) and its routine at Info (leases acquired, retention purges). Default:
	// slog.Default() at Warn and above, so a failing relay is never silent.
	Logger *slog.Logger
}

// The defaults of [Config] and [Retention], each described at its field.
const (
	DefaultSchema               = sqlq.DefaultSchema
	DefaultMode                 = Ordered
	DefaultPartitions           = 16
	DefaultBatchSize            = 100
	DefaultMaxPerAggregate      = 10
	DefaultBatchTimeout         = 30 * time.Second
	DefaultFallbackPollInterval = 5 * time.Second
	DefaultPollInterval         = 500 * time.Millisecond
	DefaultWakeup               = WakeupListen
	DefaultClaimCooldown        = 5 * time.Millisecond
	// DefaultUnorderedConcurrency is the number of batches in flight that the unordered
	// relays of a schema share when their Concurrency is unset.
	DefaultUnorderedConcurrency = 2
	// DefaultOrderedConcurrency is the number of batches in flight that the ordered
	// relays of a schema share when their Concurrency is unset.
	DefaultOrderedConcurrency   = 2
	DefaultPublishCalls         = 32
	DefaultSlowPublish          = 50 * time.Millisecond
	DefaultMaxAttempts          = 10
	DefaultRetryBaseDelay       = time.Second
	DefaultRetryMaxDelay        = 10 * time.Minute
	DefaultBreakerMinAggregates = 3
	DefaultBreakerInitialDelay  = time.Second
	DefaultBreakerMaxDelay      = 30 * time.Second
	DefaultShutdownTimeout      = 10 * time.Second
	DefaultLeaseTTL             = 10 * time.Second
	DefaultRetentionMode        = KeepThenDelete
	DefaultRetentionKeep        = 7 * 24 * time.Hour
	DefaultRetentionInterval    = time.Minute
	DefaultRetentionBatchSize   = 1000
)

const maxBatchSize = 10000

// withDefaults returns a copy of c with defaults filled in, or an error naming the
// first invalid field. Concurrency stays as set (0: the default, see workerPlan).
func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg.Schema = cmp.Or(cfg.Schema, DefaultSchema)
	cfg.Mode = cmp.Or(cfg.Mode, DefaultMode)
	cfg.Partitions = cmp.Or(cfg.Partitions, DefaultPartitions)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.MaxPerAggregate = cmp.Or(cfg.MaxPerAggregate, DefaultMaxPerAggregate)
	cfg.MaxBatchEvents = cmp.Or(cfg.MaxBatchEvents, min(cfg.BatchSize*cfg.MaxPerAggregate, maxBatchSize))
	cfg.BatchTimeout = cmp.Or(cfg.BatchTimeout, DefaultBatchTimeout)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.FallbackPollInterval = cmp.Or(cfg.FallbackPollInterval, DefaultFallbackPollInterval)
	cfg.Wakeup = cmp.Or(cfg.Wakeup, DefaultWakeup)
	cfg.ClaimCooldown = cmp.Or(cfg.ClaimCooldown, DefaultClaimCooldown)
	cfg.PublishCalls = cmp.Or(cfg.PublishCalls, DefaultPublishCalls)
	cfg.SlowPublish = cmp.Or(cfg.SlowPublish, DefaultSlowPublish)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.RetryBaseDelay = cmp.Or(cfg.RetryBaseDelay, DefaultRetryBaseDelay)
	cfg.RetryMaxDelay = cmp.Or(cfg.RetryMaxDelay, DefaultRetryMaxDelay)
	cfg.BreakerMinAggregates = cmp.Or(cfg.BreakerMinAggregates, DefaultBreakerMinAggregates)
	cfg.BreakerInitialDelay = cmp.Or(cfg.BreakerInitialDelay, DefaultBreakerInitialDelay)
	cfg.BreakerMaxDelay = cmp.Or(cfg.BreakerMaxDelay, DefaultBreakerMaxDelay)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, DefaultShutdownTimeout)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, DefaultLeaseTTL)
	cfg.Retention.Mode = cmp.Or(cfg.Retention.Mode, DefaultRetentionMode)
	cfg.Retention.Keep = cmp.Or(cfg.Retention.Keep, DefaultRetentionKeep)
	cfg.Retention.Interval = cmp.Or(cfg.Retention.Interval, DefaultRetentionInterval)
	cfg.Retention.BatchSize = cmp.Or(cfg.Retention.BatchSize, DefaultRetentionBatchSize)
	if cfg.Logger == nil {
		cfg.Logger = slogdefault.Logger()
	}
	cfg.TypeWeights = maps.Clone(cfg.TypeWeights) // the caller's map may change
	cfg.IsolatedTypes = slices.Clone(cfg.IsolatedTypes)
	cfg.TypeRates = maps.Clone(cfg.TypeRates)

	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if err := sqlq.ValidateSchema(cfg.Schema); err != nil {
		errs = append(errs, fmt.Errorf("Schema: %w", err))
	}
	check(cfg.Mode == Ordered || cfg.Mode == Unordered, "Mode must be %q or %q, got %q", Ordered, Unordered, cfg.Mode)
	check(cfg.Partitions >= 1 && cfg.Partitions <= outboxmigrate.EventPartitions, "Partitions must be between 1 and %d, got %d", outboxmigrate.EventPartitions, cfg.Partitions)
	check(cfg.BatchSize >= 1 && cfg.BatchSize <= maxBatchSize, "BatchSize must be between 1 and %d, got %d", maxBatchSize, cfg.BatchSize)
	check(cfg.MaxPerAggregate >= 1 && cfg.MaxPerAggregate <= maxBatchSize, "MaxPerAggregate must be between 1 and %d, got %d", maxBatchSize, cfg.MaxPerAggregate)
	check(cfg.MaxBatchEvents >= 1 && cfg.MaxBatchEvents <= 10*maxBatchSize, "MaxBatchEvents must be between 1 and %d, got %d", 10*maxBatchSize, cfg.MaxBatchEvents)
	check(cfg.BatchTimeout > 0, "BatchTimeout must be positive, got %s", cfg.BatchTimeout)
	check(cfg.PollInterval > 0, "PollInterval must be positive, got %s", cfg.PollInterval)
	check(cfg.FallbackPollInterval > 0, "FallbackPollInterval must be positive, got %s", cfg.FallbackPollInterval)
	check(cfg.Wakeup == WakeupListen || cfg.Wakeup == WakeupPoll, "Wakeup must be %q or %q, got %q", WakeupListen, WakeupPoll, cfg.Wakeup)
	check(cfg.Concurrency >= 0 && cfg.Concurrency <= maxWorkers, "Concurrency must be between 1 and 64 (or 0: the default), got %d", cfg.Concurrency)
	check(cfg.SlowPublish > 0, "SlowPublish must be positive, got %s", cfg.SlowPublish)
	check(cfg.PublishCalls >= 1 && cfg.PublishCalls <= 1024, "PublishCalls must be between 1 and 1024, got %d", cfg.PublishCalls)
	for t, w := range cfg.TypeWeights {
		check(t != "" && w >= 1 && w <= maxBatchSize, "TypeWeights must map aggregate types to weights between 1 and %d, got %q: %d", maxBatchSize, t, w)
	}
	if len(cfg.IsolatedTypes) > 0 {
		check(cfg.Mode == Ordered, "IsolatedTypes needs Mode %q, got %q", Ordered, cfg.Mode)
		check(cfg.Concurrency >= 2, "IsolatedTypes needs a Concurrency of 2 or more (a worker for the other types), got %d", cfg.Concurrency)
		for i, t := range cfg.IsolatedTypes {
			check(t != "" && !slices.Contains(cfg.IsolatedTypes[:i], t), "IsolatedTypes must name distinct aggregate types, got %q", cfg.IsolatedTypes)
		}
	}
	if len(cfg.TypeRates) > 0 {
		check(cfg.Mode == Ordered, "TypeRates needs Mode %q, got %q", Ordered, cfg.Mode)
	}
	for _, t := range slices.Sorted(maps.Keys(cfg.TypeRates)) {
		r := cfg.TypeRates[t]
		check(t != "" && r > 0 && !math.IsInf(r, 0), "TypeRates must map aggregate types to positive events a second, got %q: %v", t, r)
	}
	check(cfg.MaxAttempts >= 1, "MaxAttempts must be at least 1, got %d", cfg.MaxAttempts)
	check(cfg.RetryBaseDelay > 0, "RetryBaseDelay must be positive, got %s", cfg.RetryBaseDelay)
	check(cfg.RetryMaxDelay >= cfg.RetryBaseDelay, "RetryMaxDelay (%s) must be at least RetryBaseDelay (%s)", cfg.RetryMaxDelay, cfg.RetryBaseDelay)
	check(cfg.BreakerMinAggregates >= 1, "BreakerMinAggregates must be at least 1, got %d", cfg.BreakerMinAggregates)
	check(cfg.BreakerInitialDelay > 0, "BreakerInitialDelay must be positive, got %s", cfg.BreakerInitialDelay)
	check(cfg.BreakerMaxDelay >= cfg.BreakerInitialDelay, "BreakerMaxDelay (%s) must be at least BreakerInitialDelay (%s)", cfg.BreakerMaxDelay, cfg.BreakerInitialDelay)
	check(cfg.LeaseTTL >= 300*time.Millisecond, "LeaseTTL must be at least 300ms, got %s", cfg.LeaseTTL)
	check(cfg.ShutdownTimeout > 0, "ShutdownTimeout must be positive, got %s", cfg.ShutdownTimeout)
	check(cfg.Retention.Mode == KeepThenDelete || cfg.Retention.Mode == DeleteOnPublish || cfg.Retention.Mode == KeepThenArchive,
		"Retention.Mode must be %q, %q or %q, got %q", KeepThenDelete, DeleteOnPublish, KeepThenArchive, cfg.Retention.Mode)
	check(cfg.Retention.Keep > 0, "Retention.Keep must be positive, got %s", cfg.Retention.Keep)
	check(cfg.Retention.Interval > 0, "Retention.Interval must be positive, got %s", cfg.Retention.Interval)
	check(cfg.Retention.BatchSize >= 1 && cfg.Retention.BatchSize <= 100000, "Retention.BatchSize must be between 1 and 100000, got %d", cfg.Retention.BatchSize)
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("relay config: %w", errors.Join(errs...))
	}
	return cfg, nil
}

// workerPlan is how many batches a relay runs at once: at most max; with shared, its
// share of DefaultUnorderedConcurrency among the live relays of the schema.
type workerPlan struct {
	max    int
	shared bool
}

// workers returns the plan for c (defaults filled in) on a pool of maxConns
// connections: Concurrency when set; else the mode's default (DefaultOrderedConcurrency,
// DefaultUnorderedConcurrency) shared with the schema's other relays — at most half the
// pool (at least 1), which stays free for retention, a sink or the application.
func (c *Config) workers(maxConns int) (workerPlan, error) {
	p := workerPlan{max: c.Concurrency}
	switch {
	case c.Concurrency > 0:
	case c.Mode == Ordered:
		p.max, p.shared = min(DefaultOrderedConcurrency, max(1, maxConns/2)), true
	default:
		p.max, p.shared = min(DefaultUnorderedConcurrency, max(1, maxConns/2)), true
	}
	if p.max > maxConns {
		return workerPlan{}, fmt.Errorf("relay config: Concurrency %d is more than the pool's MaxConns %d: batches would wait for each other's connections", p.max, maxConns)
	}
	p.shared = p.shared && p.max > 1
	return p, nil
}

// active is how many of the plan's workers run batches while members relays of the
// schema are alive: all of them, or a share of the default (at least one). On a small
// server many claims at once lose more than they gain: unordered ones to SKIP LOCKED
// walking past each other's rows (4 relays of 2 batches each drained at 0.57–0.74 of the
// SQL limit, 4 relays of 1 at 0.70–0.86; ADR 0006), ordered ones to eight batch
// transactions contending for two cores (0.42 against 0.61; ADR 0027).
func (p workerPlan) active(members int) int {
	if !p.shared {
		return p.max
	}
	return max(1, p.max/max(1, members))
}
