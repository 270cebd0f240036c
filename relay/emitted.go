package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/emitted"
)

// Emitted is an event a change-data-capture source read from the WAL in table-less mode
// ([outbox.Writer.Emit]): it has no row in the events table (Message.Seq is 0).
type Emitted struct {
	Message outbox.Message
	// AvailableAt is when it may be published; zero or past: now. A later one is
	// written to the table, where the claims schedule it.
	AvailableAt time.Time
}

// EmittedResult says what [Relay.PublishEmitted] did with the events it was given.
type EmittedResult struct {
	// Published counts the events the sink acknowledged (no row was ever written).
	Published int
	// Written counts the events written to the events table instead, where the relay's
	// polling claims publish them like any row; Retried and Dead count those of them
	// written with a failed attempt (pending after a backoff) and dead.
	Written, Retried, Dead int
}

// PublishEmitted publishes events that exist only in the WAL (table-less mode), in the
// order given (the commit order), through the relay's sink, breaker, classification and
// Observer, and returns once each is either acknowledged by the sink or written to the
// events table. An event is written to the table, not published, when it cannot go now:
// it is paused or scheduled later, or (ordered mode) an earlier event of its aggregate is
// in the table, pending or dead; when the sink is down (the breaker is open, or the call
// finds it down); and when its publish fails — pending after its backoff with the
// attempt counted, or dead. In ordered mode every later event of an aggregate one of
// whose events goes to the table goes there too, behind it. From then on the relay's
// polling claims publish those rows, with their retries, dead letters, replay and
// discard (docs/adr/0026-cdc-discovers-the-table-keeps-the-state.md).
//
// A crash or an error can leave an event both published and not confirmed to the slot,
// or written and not confirmed: the source reads it again, and PublishEmitted publishes
// it again (a duplicate) or skips its row (its id is there). An error (the database, ctx)
// means the events are neither all published nor all written: the caller must not
// confirm their position and must call again with the same events.
func (r *Relay) PublishEmitted(ctx context.Context, events []Emitted) (EmittedResult, error) {
	res, err := r.batches.publishEmitted(ctx, events)
	if res.Written > 0 {
		r.Wake()
	}
	return res, err
}

// publishEmitted is PublishEmitted's work (see there).
func (b *batcher) publishEmitted(ctx context.Context, events []Emitted) (EmittedResult, error) {
	var res EmittedResult
	if len(events) == 0 {
		return res, nil
	}
	start := time.Now()
	msgs := make([]outbox.Message, len(events))
	for i, e := range events {
		msgs[i] = e.Message
		msgs[i].Seq = int64(i) // in the outcomes the index stands for the seq it does not have; the sink gets 0
		msgs[i].Attempt = max(msgs[i].Attempt, 1)
	}
	table, err := b.emittedToTable(ctx, events, msgs)
	if err != nil {
		return res, err
	}
	var send []outbox.Message
	for i, m := range msgs {
		if !table[i] {
			send = append(send, m)
		}
	}
	var (
		out  settlement
		late *lateEmitted
	)
	if len(send) > 0 {
		out, late = b.publishEmittedNow(ctx, send)
	}
	decided := make(map[int64]int, len(out.outcomes.Seqs))
	for j, seq := range out.outcomes.Seqs {
		decided[seq] = j
	}
	// What is not published goes to the table; in ordered mode, with every later event
	// of its aggregate (the sink sent none of them: ErrNotSent).
	var rows emittedRows
	stopped := map[aggregateKey]bool{}
	for i, m := range msgs {
		j, ok := decided[m.Seq]
		if ok && outcome(out.outcomes.Outcomes[j]) == outcomePublished && !stopped[keyOf(m)] {
			res.Published++
			continue
		}
		o, reason, delay := outcomeUntouched, (*string)(nil), int64(0)
		if ok {
			o, reason, delay = outcome(out.outcomes.Outcomes[j]), out.outcomes.Errors[j], out.outcomes.DelaysMS[j]
		} else if !table[i] {
			out.add(m.Seq, outcomeUntouched, nil, 0) // the sink was down: reported not attempted
		}
		if o == outcomePublished {
			o = outcomeUntouched // published after an earlier event of its aggregate was not: cannot happen with a sink that keeps the contract
		}
		if b.cfg.Mode == Ordered {
			stopped[keyOf(m)] = true
		}
		at := events[i].AvailableAt
		if o == outcomeHeld {
			at = late.until
		}
		rows.add(&events[i], o, reason, delay, at)
		switch o {
		case outcomeRetry:
			res.Retried++
		case outcomeDead:
			res.Dead++
		}
	}
	res.Written = len(rows.Columns.IDs)
	if res.Written > 0 {
		seqs, err := b.writeEmitted(ctx, &rows)
		if err != nil {
			if late != nil {
				late.running.cancel()
				<-late.running.done
			}
			return res, err
		}
		if late != nil {
			b.late.Go(func() { late.settle(context.WithoutCancel(ctx), b, seqs) })
		}
	}
	b.noteDue(out.earliestRetry)
	b.stats.add(batchResult{claimed: len(msgs), published: res.Published, retried: res.Retried, dead: res.Dead})
	if b.cfg.Observer != nil && len(send) > 0 {
		b.observe(start, false, send, &out)
	}
	for _, d := range out.deadMsgs {
		b.log.WarnContext(ctx, "event dead", slog.String("event_id", d.msg.ID.String()), slog.String("event_type", d.msg.EventType),
			slog.String("aggregate_type", d.msg.AggregateType), slog.String("aggregate_id", d.msg.AggregateID),
			slog.Int("attempt", d.msg.Attempt), slog.String("error", d.reason))
	}
	return res, nil
}

// emittedToTable says which events go to the table without a publish: scheduled later,
// paused, or (ordered mode) behind a row of their aggregate, and in ordered mode every
// later event of an aggregate one of whose events does (emitted_behind.sql).
func (b *batcher) emittedToTable(ctx context.Context, events []Emitted, msgs []outbox.Message) ([]bool, error) {
	p := behindParams{
		AggregateTypes: make([]string, len(msgs)), AggregateIDs: make([]string, len(msgs)),
		Ordered: b.cfg.Mode == Ordered, PublishPastDead: b.cfg.PublishPastDead,
	}
	for i, m := range msgs {
		p.AggregateTypes[i], p.AggregateIDs[i] = m.AggregateType, m.AggregateID
	}
	qctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout)
	defer cancel()
	rows, err := b.pool.Query(qctx, b.q.emittedBehind.SQL, b.q.emittedBehind.Args(&p)...)
	if err != nil {
		return nil, fmt.Errorf("relay: look up what emitted events wait behind: %w", err)
	}
	defer rows.Close()
	table := make([]bool, len(msgs))
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			return nil, fmt.Errorf("relay: look up what emitted events wait behind: %w", err)
		}
		table[i] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay: look up what emitted events wait behind: %w", err)
	}
	now := time.Now()
	stopped := map[aggregateKey]bool{}
	for i, m := range msgs {
		k := keyOf(m)
		table[i] = table[i] || events[i].AvailableAt.After(now) || stopped[k]
		if table[i] && b.cfg.Mode == Ordered {
			stopped[k] = true
		}
	}
	return table, nil
}

// publishEmittedNow publishes msgs (their Seq, an index, is sent as 0) unless the
// breaker holds the sink down, and returns what classify decided of the calls that
// returned; with the sink down, nothing (each message then goes to the table untouched).
// Calls still running past SlowPublish (publish) are not waited for: their messages are
// returned in late, to be written as held rows and settled when the calls return.
func (b *batcher) publishEmittedNow(ctx context.Context, msgs []outbox.Message) (settlement, *lateEmitted) {
	if ok, _ := b.breaker.acquire(time.Now()); !ok {
		return settlement{}, nil
	}
	sent := make([]outbox.Message, len(msgs)) // as the sink sees them: no seq (no row)
	for i, m := range msgs {
		sent[i] = m
		sent[i].Seq = 0
	}
	started := time.Now()
	// no cut: calls go on without the others only once one returned, as a by-seq batch's
	p, running, err := b.publish(ctx, sent, nil)
	if err != nil { // the sink broke its contract: as down, nothing settled by it
		if running != nil {
			running.cancel()
			<-running.done
		}
		b.breaker.down(time.Now())
		return settlement{}, nil
	}
	returned, returnedResults := msgs, p
	var late *lateEmitted
	if running != nil {
		returned, returnedResults = p.without(msgs, running.msgs)
		late = &lateEmitted{
			msgs: msgs, p: p, running: running,
			until: time.Now().Add(b.cfg.BatchTimeout - time.Since(started) + heldMargin).Truncate(time.Microsecond),
		}
	}
	out, down := b.classify(returned, returnedResults)
	if down {
		if late != nil { // their events go to the table untouched with the others
			running.cancel()
			<-running.done
		}
		if b.breaker.down(time.Now()) {
			b.stats.breakerOpens.Add(1)
			b.log.WarnContext(ctx, "sink down: breaker open; no attempts counted", slog.Any("error", firstError(p.errs)))
		}
		b.stats.sinkDownBatches.Add(1)
		return settlement{}, nil
	}
	if out.published > 0 {
		b.breaker.success()
	} else {
		b.breaker.inconclusive()
	}
	if late != nil {
		for _, i := range running.msgs {
			out.add(msgs[i].Seq, outcomeHeld, nil, 0)
		}
	}
	return out, late
}

// lateEmitted is the Publish calls of emitted events still running after
// publishEmittedNow returned: their events are written held (pending, available at
// until, the token settle_late.sql checks) and settled when the calls return.
type lateEmitted struct {
	msgs    []outbox.Message // the published messages (Seq: their index in the call's events)
	p       published
	running *inFlight
	until   time.Time
}

// settle waits for the calls and settles the held rows (settleLate): seqs maps each
// written event's id to its row's seq. An event whose row was there already (read again
// after a crash) has none: it stays held until l.until, then the claims take it.
func (l *lateEmitted) settle(ctx context.Context, b *batcher, seqs map[[16]byte]int64) {
	<-l.running.done // its err is set by then: the copy below carries it
	msgs := slices.Clone(l.msgs)
	var keep []int
	for _, i := range l.running.msgs {
		if seq, ok := seqs[msgs[i].ID]; ok {
			msgs[i].Seq = seq
			keep = append(keep, i)
		}
	}
	running := *l.running
	running.msgs = keep
	b.settleLate(ctx, heldRows{msgs: msgs, p: l.p, running: &running, until: l.until, parts: []int{}, epochs: []int64{}})
}

// writeEmitted writes rows to the events table (emitted_write.sql), without JIT as the
// claims (claimSettings): a statement over thousands of rows is estimated high enough to
// be compiled, which costs more than it runs. It returns the seq of each row it wrote,
// by id (a row already there, read again after a crash, is not).
func (b *batcher) writeEmitted(ctx context.Context, rows *emittedRows) (map[[16]byte]int64, error) {
	qctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout)
	defer cancel()
	seqs := make(map[[16]byte]int64, len(rows.Columns.IDs))
	err := pgx.BeginFunc(qctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(qctx, "SET LOCAL jit = off"); err != nil {
			return err
		}
		written, err := tx.Query(qctx, b.q.emittedWrite.SQL, b.q.emittedWrite.Args(rows)...)
		if err != nil {
			return err
		}
		var (
			id  [16]byte
			seq int64
		)
		_, err = pgx.ForEachRow(written, []any{&id, &seq}, func() error { seqs[id] = seq; return nil })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("relay: write %d emitted events to the table: %w", len(rows.Columns.IDs), err)
	}
	return seqs, nil
}

// behindParams are emitted_behind.sql's parameters, bound by name.
type behindParams struct {
	AggregateTypes  []string `sql:"aggregate_types"`
	AggregateIDs    []string `sql:"aggregate_ids"`
	Ordered         bool     `sql:"ordered"`
	PublishPastDead []string `sql:"publish_past_dead"`
}

// emittedRows are emitted_write.sql's parameters, bound by name: one element per event
// in every column, then what became of it.
type emittedRows struct {
	Columns  rowColumns `sql:",inline"`
	Outcomes []string   `sql:"outcomes"`
	Errors   []*string  `sql:"errors"`
	DelaysMS []int64    `sql:"delays_ms"`
}

func (r *emittedRows) add(e *Emitted, o outcome, reason *string, delayMS int64, availableAt time.Time) {
	m := e.Message
	m.Payload = nilIfEmpty(m.Payload)
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now()
	}
	var tp *string
	if m.TraceParent != "" {
		tp = &m.TraceParent
	}
	r.Columns.add(&m, headersJSON(m.Headers), tp, emitted.IsJSON(m.ContentType), availableAt)
	r.Outcomes, r.Errors, r.DelaysMS = append(r.Outcomes, string(o)), append(r.Errors, reason), append(r.DelaysMS, delayMS)
}

// headersJSON encodes an event's headers as the JSON object the headers column holds.
func headersJSON(h map[string]string) string {
	if len(h) == 0 {
		return "{}"
	}
	b, err := json.Marshal(h)
	if err != nil { // a map of strings always encodes
		panic(fmt.Sprintf("relay: encode headers: %v", err))
	}
	return string(b)
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return slices.Clone(b)
}
