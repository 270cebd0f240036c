package relay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/sqlq"
)

// SeqsResult says what [Relay.PublishSeqs] did with the seqs it was given.
type SeqsResult struct {
	// Claimed counts the events its batches claimed; Published, Retried and Dead what
	// became of them, as for any batch (a batch that found the sink down, or was fenced,
	// put its events back: they count as claimed only).
	Claimed, Published, Retried, Dead int
	// Left counts the seqs no batch claimed: rows no longer pending (published, dead or
	// deleted already), or not claimable now — an earlier pending or a dead row of their
	// aggregate holds them, they are scheduled later, paused, in a partition another
	// relay leases, in another batch, or the sink is down (the breaker is open:
	// PublishSeqs then wakes the relay's workers, which wait for the breaker and probe).
	// They stay as they are: the pending ones are the polling claims' to publish.
	Left int
}

// PublishSeqs publishes the events with the given seqs, of those that can be published
// now, through the relay's batches — the claim, publish, classify and settle of every
// batch, with its retries, dead letters, breaker, fencing and Observer — and returns
// once each of them is settled. It is the entry of a change-data-capture source (package
// cdc), which reads from the WAL which events committed: a batch claims them by seq, a
// primary-key lookup each, where a polling claim walks the pending indexes
// (docs/adr/0026-cdc-discovers-the-table-keeps-the-state.md).
//
// A seq it does not claim is left as it is (SeqsResult.Left says why that can be): a
// pending row stays pending, and the relay's own polling claims publish it, in order,
// as any other. So calling PublishSeqs is never needed for an event to go out, only
// for it to go out sooner; it keeps every guarantee of the polling relay, in ordered
// mode by claiming only an aggregate's head and the events that follow it without a
// gap. In ordered mode it claims only in the partitions the relay leases: call it while
// [Relay.Run] runs. An error (the database, ctx) leaves the remaining seqs unclaimed.
func (r *Relay) PublishSeqs(ctx context.Context, seqs []int64) (SeqsResult, error) {
	if r.cfg.Mode == Unordered && r.workers.max > 1 {
		return r.publishSeqsAtOnce(ctx, seqs)
	}
	var out SeqsResult
	size := r.cfg.BatchSize
	if r.cfg.Mode == Ordered {
		size = r.cfg.MaxBatchEvents
	}
	rest := slices.Clone(seqs)
	for len(rest) > 0 {
		if ok, _ := r.batches.breaker.acquire(time.Now()); !ok {
			// the sink is down: the polling claims take these up, after the breaker's
			// wait and its probe, not at their poll interval
			r.Wake()
			break
		}
		chunk := rest[:min(size, len(rest))]
		res, err := r.batches.run(ctx, workerShare{index: 0, of: 1}, chunk)
		out.Claimed += res.claimed
		out.Published += res.published
		out.Retried += res.retried
		out.Dead += res.dead
		if err != nil || res.claimed == 0 {
			r.batches.breaker.inconclusive()
		}
		if err != nil {
			out.Left = len(seqs) - out.Claimed
			return out, fmt.Errorf("relay: publish by seq: %w", err)
		}
		if r.batches.breaker.open() {
			r.Wake() // the batch found the sink down: as above
			break
		}
		if res.claimed == 0 {
			rest = rest[len(chunk):] // none of these can go now: the polling claims' then
			continue
		}
		// what the batch left of the chunk is tried again with the next seqs: in ordered
		// mode an aggregate's share of a batch is bounded, and its rest follows
		rest = slices.DeleteFunc(rest, func(s int64) bool { _, found := slices.BinarySearch(res.taken, s); return found })
	}
	out.Left = len(seqs) - out.Claimed
	return out, nil
}

// publishSeqsAtOnce is PublishSeqs in unordered mode: seqs in chunks of BatchSize, as
// many batches at once as the relay has workers (no order to keep between them). A chunk
// runs once; what its claim leaves is the polling claims'.
func (r *Relay) publishSeqsAtOnce(ctx context.Context, seqs []int64) (SeqsResult, error) {
	var (
		mu       sync.Mutex
		out      SeqsResult
		firstErr error
		wg       sync.WaitGroup
	)
	slots := make(chan struct{}, r.workers.max)
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return firstErr != nil }
	for rest := seqs; len(rest) > 0 && ctx.Err() == nil; {
		chunk := rest[:min(r.cfg.BatchSize, len(rest))]
		rest = rest[len(chunk):]
		slots <- struct{}{}
		if failed() { // the database failed a batch: the rest stays for the polling claims
			<-slots
			break
		}
		if ok, _ := r.batches.breaker.acquire(time.Now()); !ok {
			<-slots
			r.Wake() // the sink is down, or another batch probes it: as in PublishSeqs
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			res, err := r.batches.run(ctx, workerShare{index: 0, of: 1}, chunk)
			if err != nil || res.claimed == 0 {
				r.batches.breaker.inconclusive()
			}
			mu.Lock()
			defer mu.Unlock()
			out.Claimed += res.claimed
			out.Published += res.published
			out.Retried += res.retried
			out.Dead += res.dead
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("relay: publish by seq: %w", err)
			}
		})
	}
	wg.Wait()
	if r.batches.breaker.open() {
		r.Wake()
	}
	out.Left = len(seqs) - out.Claimed
	return out, firstErr
}

// unorderedSeqClaim holds the parameters of an unordered by-seq claim
// (claim_floor.sql's, then claim_seqs_unordered_pick.sql's), bound by name.
type unorderedSeqClaim struct {
	Floor   int64   `sql:"floor"`
	Replays int64   `sql:"replays"`
	Seqs    []int64 `sql:"seqs"`
}

// orderedSeqClaim holds the parameters of an ordered by-seq claim (claim_floor.sql's,
// then claim_seqs_ordered_pick.sql's, which says what each means), bound by name.
type orderedSeqClaim struct {
	Floor           int64    `sql:"floor"`
	Replays         int64    `sql:"replays"`
	Seqs            []int64  `sql:"seqs"`
	Scope           []int    `sql:"scope"` // nil: all
	Partitions      int      `sql:"partitions"`
	MaxPerAggregate int      `sql:"max_per_aggregate"`
	PublishPastDead []string `sql:"publish_past_dead"`
}

// seqClaimStatement is the by-seq claim of a mode, with its parameters bound by name.
type seqClaimStatement struct {
	sql  string
	args func(floor floorArgs, seqs []int64, scope []int) []any
}

// The by-seq claim of each mode and kind of claim (false: mark published, true: delete).
var seqClaimQueries = map[Mode]map[bool]string{
	Ordered:   {false: "claim_seqs_ordered", true: "claim_seqs_ordered_delete"},
	Unordered: {false: "claim_seqs_unordered", true: "claim_seqs_unordered_delete"},
}

// bindSeqClaim binds the by-seq claim of cfg's mode and retention.
func bindSeqClaim(cfg *Config, quoted string) seqClaimStatement {
	name := seqClaimQueries[cfg.Mode][deletes(cfg.Retention.Mode)]
	if cfg.Mode == Ordered {
		s := sqlq.Bind[orderedSeqClaim](name, quoted)
		return seqClaimStatement{s.SQL, func(f floorArgs, seqs []int64, scope []int) []any {
			return s.Args(&orderedSeqClaim{
				Floor: f.floor, Replays: f.replays, Seqs: seqs, Scope: scope, Partitions: cfg.Partitions,
				MaxPerAggregate: cfg.MaxPerAggregate, PublishPastDead: cfg.PublishPastDead,
			})
		}}
	}
	s := sqlq.Bind[unorderedSeqClaim](name, quoted)
	return seqClaimStatement{s.SQL, func(f floorArgs, seqs []int64, _ []int) []any {
		return s.Args(&unorderedSeqClaim{Floor: f.floor, Replays: f.replays, Seqs: seqs})
	}}
}

// claimSeqs runs the by-seq claim of seqs in scope and returns what it claimed. The
// floor only bounds its claim_floor.sql part (the rows it claims are named): it reads
// the floor without taking a turn of its full claims, and tells it nothing.
func (b *batcher) claimSeqs(ctx context.Context, tx *batchTx, scope claimScope, seqs []int64) (claimedBatch, error) {
	q := b.q.claimSeqs
	rows, done, err := b.claimRows(ctx, tx, q.sql, q.args(b.floor.current(), seqs, scope.parts))
	defer done()
	if err != nil {
		return claimedBatch{}, fmt.Errorf("claim by seq: %w", err)
	}
	read, err := b.readClaimed(rows, len(seqs), &seen{})
	if err != nil {
		return claimedBatch{}, fmt.Errorf("claim by seq: %w", err)
	}
	c := b.assemble(read)
	c.full = len(read.msgs) >= len(seqs)
	return c, nil
}

// seqs returns the seqs of every row c claimed, sorted.
func (c *claimedBatch) seqs() []int64 {
	out := make([]int64, 0, len(c.msgs)+len(c.bad)+len(c.skipped))
	for _, m := range c.msgs {
		out = append(out, m.Seq)
	}
	for _, r := range c.bad {
		out = append(out, r.msg.Seq)
	}
	for _, m := range c.skipped {
		out = append(out, m.Seq)
	}
	slices.Sort(out)
	return out
}
