package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
)

// heldMargin is how long, beyond the batch's publish budget, the rows of Publish calls
// still running after their batch stay held in flight: the calls have ended by then, and
// their settling has had time to run.
const heldMargin = 5 * time.Second

// heldRows are the rows a batch committed as held in flight (outcomeHeld) because their
// Publish calls were still running.
type heldRows struct {
	msgs    []outbox.Message // the whole batch's messages
	p       published        // the whole batch's results, filled in by the calls
	running *inFlight
	until   time.Time // available_at of the held rows: the token settle_late.sql checks
	parts   []int     // the batch's leases (ordered mode)
	epochs  []int64
}

// without returns the messages of msgs, and their results in p, other than those at
// indexes skip (ascending): what the calls that returned said.
func (p published) without(msgs []outbox.Message, skip []int) ([]outbox.Message, published) {
	omit := make(map[int]bool, len(skip))
	for _, i := range skip {
		omit[i] = true
	}
	var (
		out []outbox.Message
		q   published
	)
	for i, m := range msgs {
		if omit[i] {
			continue
		}
		out = append(out, m)
		q.errs, q.late, q.call = append(q.errs, p.errs[i]), append(q.late, p.late[i]), append(q.call, p.call[i])
	}
	return out, q
}

// settleLate waits for the Publish calls a batch went on without and settles their
// messages (those h.running.msgs names) in transactions of their own (settle_late.sql),
// each by what its call said, classified as a batch's are, but never as an outage (the
// batch decided that, without them) — unless none of the batch's calls had returned
// (inFlight.whole) and no call of it has succeeded since. Calls settle as they return:
// with the first call back, those that return soon after it (within four times as long
// as it took after the batch went on, at most SlowPublish), so a call that is late only
// by a moment does not wait for one that hangs. In ordered mode it checks the batch's
// leases first: if one moved on, it changes nothing, and the rows become claimable when
// their hold runs out (the new owner publishes them again). It changes only rows still
// held at h.until.
func (b *batcher) settleLate(ctx context.Context, h heldRows) {
	defer h.running.cancel()
	settles := make(map[int]bool, len(h.running.msgs))
	for _, i := range h.running.msgs {
		settles[i] = true
	}
	judge := lateJudgement{whole: h.running.whole}
	for left := h.running.calls; left > 0; {
		group := []callReturn{<-h.running.returned}
		left--
		wait := time.NewTimer(min(b.cfg.SlowPublish, 4*time.Since(h.running.wentOn)))
	gather:
		for left > 0 {
			select {
			case r := <-h.running.returned:
				group = append(group, r)
				left--
			case <-wait.C:
				break gather
			}
		}
		wait.Stop()
		var idx []int
		for _, r := range group {
			if r.err != nil {
				b.log.WarnContext(ctx, "late publish", slog.Any("error", r.err))
				continue // a sink that broke its contract: the rows stay held until h.until, then go again
			}
			for _, i := range r.msgs {
				if settles[i] {
					idx = append(idx, i)
				}
			}
		}
		if len(idx) > 0 {
			b.settleLateCalls(ctx, h, idx, &judge)
		}
	}
}

// lateJudgement is how settleLate judges the groups of one batch's calls: as a batch's
// while whole (none of its calls had shown the sink up), and whether it has counted the
// batch as one that found the sink down.
type lateJudgement struct {
	whole, counted bool
}

// settleLateCalls settles the messages of h at indexes idx, whose calls have returned.
func (b *batcher) settleLateCalls(ctx context.Context, h heldRows, idx []int, judge *lateJudgement) {
	var msgs []outbox.Message
	var p published
	for _, i := range idx {
		msgs = append(msgs, h.msgs[i])
		p.errs, p.late, p.call = append(p.errs, h.p.errs[i]), append(p.late, h.p.late[i]), append(p.call, h.p.call[i])
	}
	var (
		out  settlement
		down bool
	)
	if !judge.whole {
		out = b.decide(msgs, p, failures(msgs, p))
	} else if out, down = b.classify(msgs, p); down {
		// Nothing of the batch showed the sink up, and these calls find it down: their
		// rows go back untouched (no attempt counted) and the breaker opens — as a batch
		// that found the sink down, which counts nothing else either.
		out = settlement{}
		for _, m := range msgs {
			out.add(m.Seq, outcomeUntouched, nil, 0)
		}
		if b.breaker.down(time.Now()) {
			b.stats.breakerOpens.Add(1)
			b.log.WarnContext(ctx, "sink down: breaker open; no attempts counted", slog.Any("error", firstError(p.errs)))
		}
		if !judge.counted {
			judge.counted = true
			b.stats.sinkDownBatches.Add(1)
		}
	}
	if out.published > 0 {
		judge.whole = false // the sink is up: the batch's later calls are judged as a batch's late ones
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		// as a claim's: no JIT compile for a statement whose estimate grows with its
		// rows, and each row changed where its lookup found it (settle_late.sql)
		for _, set := range claimSettings {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
		}
		if b.cfg.Mode == Ordered {
			if _, err := tx.Exec(ctx, b.q.fence.SQL, b.q.fence.Args(&fenceParams{Owner: b.owner, Partitions: h.parts, Epochs: h.epochs})...); err != nil {
				return err
			}
		}
		l := lateSettle{Outcomes: out.outcomes, HeldUntil: h.until, Deletes: deletes(b.cfg.Retention.Mode)}
		_, err := tx.Exec(ctx, b.q.settleLate.SQL, b.q.settleLate.Args(&l)...)
		return err
	})
	switch {
	case errFenced(err):
		b.stats.fencedWrites.Add(int64(len(msgs)))
		b.log.WarnContext(ctx, "late publish fenced: lease taken over", slog.Int("events", len(msgs)))
		return
	case err != nil:
		if !errors.Is(err, context.Canceled) { // cancelled: the relay is stopping
			b.log.WarnContext(ctx, "settle late publish", slog.Any("error", fmt.Errorf("%d events held until %s: %w", len(msgs), h.until, err)))
		}
		return
	}
	b.released() // the aggregates' next events can be claimed now
	if down {
		return
	}
	b.stats.latePublishes.Add(int64(len(msgs)))
	b.stats.published.Add(int64(out.published))
	b.stats.retried.Add(int64(out.retried))
	b.stats.dead.Add(int64(out.dead))
	b.observe(time.Time{}, true, msgs, &out)
	b.noteDue(out.earliestRetry)
	if out.published > 0 {
		b.breaker.success()
	}
	for _, d := range out.deadMsgs {
		b.log.WarnContext(ctx, "event dead", slog.String("event_id", d.msg.ID.String()), slog.String("event_type", d.msg.EventType),
			slog.String("aggregate_type", d.msg.AggregateType), slog.String("aggregate_id", d.msg.AggregateID),
			slog.Int("attempt", d.msg.Attempt), slog.String("error", d.reason))
	}
}

// lateSettle holds settle_late.sql's parameters, bound by name.
type lateSettle struct {
	Outcomes  rowOutcomes `sql:",inline"`
	HeldUntil time.Time   `sql:"held_until"`
	Deletes   bool        `sql:"deletes"`
}
