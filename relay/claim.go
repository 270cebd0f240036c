package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// claimedBatch is what a claim statement claimed (and marked published or deleted).
type claimedBatch struct {
	msgs    []outbox.Message // to publish, in seq order
	bad     []badRow         // undecodable rows: dead
	skipped []outbox.Message // ordered mode: after an undecodable row of their aggregate; put back untouched
	// rows holds, in delete-on-publish, what settle needs to put a row back whole, in
	// seq order.
	rows []claimedRow
	// full: the claim took as much as it may (more may be waiting); deep (ordered): an
	// aggregate brought as many events as its cut allows (more of it may be waiting)
	full, deep bool
}

// claimSettings are set in every claim transaction.
//   - JIT off: the claim's cost estimate can be large (it may read many aggregates), and the
//     server's default JIT then spent 30-550 ms compiling every claim.
//   - Sequential scans off (a penalty, not a ban): the claim is index-driven by design, and
//     the generic plan of a prepared claim, made while the table was small, scanned the
//     whole table to find the rows it had picked by ctid; it kept that plan as the
//     published rows piled up (TestOrderedClaimGenericPlanFromASmallTable).
var claimSettings = []string{"SET LOCAL jit = off", "SET LOCAL enable_seqscan = off"}

// claim runs the claim statement and returns what it claimed: in ordered mode, per
// aggregate, the contiguous prefix of locked, available rows (the statement cuts it).
func (b *batcher) claim(ctx context.Context, tx *batchTx, scope claimScope) (claimedBatch, error) {
	fa := b.floor.args(time.Now(), scope.worker)
	q := b.claimQuery(scope, fa)
	rows, done, err := b.claimRows(ctx, tx, b.q.claim.sql, b.q.claim.args(q))
	defer done()
	if err != nil {
		return claimedBatch{}, fmt.Errorf("claim batch: %w", err)
	}
	saw := seen{ordered: b.cfg.Mode == Ordered}
	read, err := b.readClaimed(rows, b.claimSizes.hint(scope.worker, q.capacity), &saw)
	if err != nil {
		return claimedBatch{}, fmt.Errorf("claim batch: %w", err)
	}
	b.claimSizes.note(scope.worker, len(read.msgs))
	if len(read.msgs) > 0 { // an empty claim returns no row, so nothing of what it saw
		b.floor.observe(fa, saw, time.Now())
		if saw.due > 0 {
			b.noteDue(fa.sent.Add(saw.due))
		}
	}
	c := b.assemble(read)
	c.full = len(read.msgs) >= q.capacity
	if b.cfg.Mode == Ordered {
		b.rates.took(read.msgs)
		cutOf, bound := read.msgs, q.rates.bound(read.msgs)
		if len(bound) > 0 {
			// their rates held these types back, not the claim: they neither make it full
			// nor ask for a larger share
			isBound := func(t string) bool { return slices.Contains(bound, t) }
			saw.sharesFull = slices.DeleteFunc(saw.sharesFull, isBound)
			cutOf = slices.DeleteFunc(slices.Clone(read.msgs), func(m outbox.Message) bool { return isBound(m.AggregateType) })
		}
		b.rateHeld(slices.Concat(q.rates.skip, bound))
		scope.rotation.advance(read.msgs)
		scope.rotation.share(read.msgs, saw.sharesFull, q.heads, b.cfg.TypeWeights)
		// a type had more heads than its share: not caught up
		allHeads, deep := b.cut(cutOf, q.heads, q.capacity)
		c.full = c.full || len(saw.sharesFull) > 0 || allHeads || deep
		c.deep = deep
	}
	return c, nil
}

// claimRows sends, in one round trip, BEGIN, the claim transaction's settings and the
// claim statement sql with args, and returns the statement's rows. done ends the round
// trip once they are read.
func (b *batcher) claimRows(ctx context.Context, tx *batchTx, sql string, args []any) (rows pgx.Rows, done func(), err error) {
	batch := &pgx.Batch{}
	settings := slices.Concat(b.sessionSettings, claimSettings)
	for _, set := range settings {
		batch.Queue(set)
	}
	batch.Queue(sql, args...)
	br := tx.begin(ctx, batch)
	done = func() { _ = br.Close() }
	for range 1 + len(settings) { // BEGIN, the settings
		if _, err := br.Exec(); err != nil {
			return nil, done, fmt.Errorf("begin: %w", err)
		}
	}
	rows, err = br.Query()
	return rows, done, err
}

// claimQuery is a claim's parameters for its scope (those of its mode), and what it may
// return at most.
type claimQuery struct {
	ordered   *orderedClaim   // Ordered mode
	unordered *unorderedClaim // Unordered mode
	capacity  int             // most rows the claim returns
	heads     int             // ordered mode: most aggregates the claim takes
	rates     rateAllowance   // ordered mode: what the rate-limited types may take
}

// claimQuery returns the parameters of the next claim in scope from the floor fa:
// BatchSize and MaxBatchEvents, halved as often as failed claims asked (narrowClaims).
func (b *batcher) claimQuery(scope claimScope, fa floorArgs) claimQuery {
	batchSize, maxEvents := b.narrowed(b.cfg.BatchSize), b.narrowed(b.cfg.MaxBatchEvents)
	if b.cfg.Mode != Ordered {
		return claimQuery{unordered: &unorderedClaim{Floor: fa.floor, Replays: fa.replays, BatchSize: batchSize}, capacity: batchSize}
	}
	// at most MaxBatchEvents heads: each gets MaxBatchEvents / heads events
	heads := min(batchSize, maxEvents)
	types, ids, limitTypes, limits := scope.rotation.args(heads)
	rates := b.rateAllowance(min(b.cfg.MaxPerAggregate, maxEvents/heads))
	only, skip := b.laneTypes(scope.lane)
	return claimQuery{
		heads: heads,
		ordered: &orderedClaim{
			Floor: fa.floor, Replays: fa.replays, Scope: scope.parts, Heads: heads, MaxPerAggregate: b.cfg.MaxPerAggregate,
			PublishPastDead: b.cfg.PublishPastDead, MaxEvents: maxEvents, Partitions: b.cfg.Partitions,
			CursorTypes: types, CursorIDs: ids, LimitTypes: limitTypes, Limits: limits, OnlyTypes: only,
			SkipTypes: slices.Concat(skip, rates.skip), CapTypes: rates.capTypes, Caps: rates.caps,
		},
		capacity: maxEvents,
		rates:    rates,
	}
}

// rateHeld makes the relay look again when the first of types, which their rates held
// back, may be claimed again (batcher.nextDue): no wake-up comes for them.
func (b *batcher) rateHeld(types []string) {
	if len(types) > 0 {
		b.noteDue(b.rates.refilled(types, int(b.leases.members.Load()), time.Now()))
	}
}

// rateAllowance is what the rate-limited types (Config.TypeRates) may take now in a claim
// whose heads bring at most perHead events each, the relay's part of their rates.
func (b *batcher) rateAllowance(perHead int) rateAllowance {
	if b.rates == nil {
		return rateAllowance{}
	}
	return b.rates.allowance(time.Now(), int(b.leases.members.Load()), perHead)
}

// unorderedClaim holds the parameters of an unordered claim (claim_floor.sql's, then
// claim_unordered_pick.sql's), bound by name.
type unorderedClaim struct {
	Floor     int64 `sql:"floor"`
	Replays   int64 `sql:"replays"`
	BatchSize int   `sql:"batch_size"`
}

// orderedClaim holds the parameters of an ordered claim (claim_floor.sql's, then
// claim_ordered_pick.sql's, which says what each means), bound by name.
type orderedClaim struct {
	Floor           int64    `sql:"floor"`
	Replays         int64    `sql:"replays"`
	Scope           []int    `sql:"scope"` // nil: all
	Heads           int      `sql:"heads"`
	MaxPerAggregate int      `sql:"max_per_aggregate"`
	PublishPastDead []string `sql:"publish_past_dead"`
	MaxEvents       int      `sql:"max_events"`
	Partitions      int      `sql:"partitions"`
	CursorTypes     []string `sql:"cursor_types"`
	CursorIDs       []string `sql:"cursor_ids"`
	LimitTypes      []string `sql:"limit_types"`
	OnlyTypes       []string `sql:"only_types"`
	SkipTypes       []string `sql:"skip_types"`
	Limits          []int    `sql:"limits"`
	CapTypes        []string `sql:"cap_types"`
	Caps            []int    `sql:"caps"`
}

// claimStatement is a claim-shaped statement (a claim, or the poison search, which
// picks what the claim would) of the relay's mode, with its parameters bound by name.
type claimStatement struct {
	sql  string
	args func(claimQuery) []any
}

// bindClaim binds the claim-shaped query name to the parameters of mode.
func bindClaim(mode Mode, name, quoted string) claimStatement {
	if mode == Ordered {
		s := sqlq.Bind[orderedClaim](name, quoted)
		return claimStatement{s.SQL, func(q claimQuery) []any { return s.Args(q.ordered) }}
	}
	s := sqlq.Bind[unorderedClaim](name, quoted)
	return claimStatement{s.SQL, func(q claimQuery) []any { return s.Args(q.unordered) }}
}

// readRows is what a claim statement returned, row by row, in its order.
type readRows struct {
	msgs    []outbox.Message
	headers [][]byte     // each message's headers as stored (JSON text)
	rows    []claimedRow // delete-on-publish: what putting each row back needs
}

// readClaimed reads the rows of a claim statement (claim_columns.sql's columns, then the
// attempts before the claim; then, with saw, claim_seen.sql's, into saw), into slices
// sized for size rows (more grow them). A value that cannot be read (written out of band:
// a time out of Go's range, say) fails with a *readError.
func (b *batcher) readClaimed(rows pgx.Rows, size int, saw *seen) (readRows, error) {
	defer rows.Close()
	var (
		out         readRows
		spare       claimedRow // a row's put-back columns when they are not kept
		traceParent *string
		minPending  *int64 // claim_seen.sql's first column: null when nothing is pending
		due         *time.Duration
	)
	keepRows := b.cfg.Retention.Mode == DeleteOnPublish
	if keepRows {
		out.rows = make([]claimedRow, 0, size)
	}
	// Rows are scanned into their slots, the few distinct types and topics are shared and
	// the id is read as bytes (uuid.UUID is an sql.Scanner, which pgx feeds a string to
	// parse): scanning was a third of a drain's relay CPU, mostly allocations.
	texts := textInterner{}
	aggType, eventType, topic, contentType := texts.column(), texts.column(), texts.column(), texts.column()
	var dst []any // a row's destinations: one slice for every row
	for rows.Next() {
		if out.msgs == nil {
			out.msgs, out.headers = make([]outbox.Message, 0, size), make([][]byte, 0, size)
		}
		out.msgs, out.headers = append(out.msgs, outbox.Message{}), append(out.headers, nil)
		m, h := &out.msgs[len(out.msgs)-1], &out.headers[len(out.headers)-1]
		row := &spare
		if keepRows {
			out.rows = append(out.rows, claimedRow{})
			row = &out.rows[len(out.rows)-1]
		}
		aggType.dst, eventType.dst, topic.dst, contentType.dst = &m.AggregateType, &m.EventType, &m.Topic, &m.ContentType
		dst = append(dst[:0],
			&m.Seq, (*[16]byte)(&m.ID), aggType, &m.AggregateID, &m.AggregateVersion, eventType,
			&m.SchemaVersion, topic, h, contentType, &m.Payload, &traceParent, &m.CreatedAt,
			&row.availableAt, &row.lastError, &row.payloadJSON, &row.attempts,
		)
		if saw != nil {
			dst = append(dst, &minPending, &saw.xmin, &saw.xmax, &saw.replays, &due)
			if saw.ordered {
				dst = append(dst, &saw.sharesFull)
			}
		}
		if err := rows.Scan(dst...); err != nil {
			return out, &readError{err}
		}
		m.Attempt = row.attempts + 1
		if traceParent != nil {
			m.TraceParent = *traceParent
		}
		if keepRows {
			row.headers, row.traceParent, row.seq = *h, traceParent, m.Seq
		}
	}
	if saw != nil && minPending != nil {
		saw.minPending = *minPending
	}
	if saw != nil && due != nil {
		saw.due = *due
	}
	return out, rows.Err()
}

// assemble turns the rows a claim read into a batch: messages in seq order (so each
// aggregate's are in write order), headers decoded. A row whose headers do not decode
// (written out of band) fails alone, dead with the reason; in ordered mode the later
// rows of its aggregate in the batch are skipped (put back untouched).
func (b *batcher) assemble(read readRows) claimedBatch {
	msgs, headers := read.msgs, read.headers
	c := claimedBatch{rows: read.rows}
	if !slices.IsSortedFunc(msgs, func(a, b outbox.Message) int { return cmp.Compare(a.Seq, b.Seq) }) {
		msgs, headers = sortBySeq(msgs, headers)
		slices.SortFunc(c.rows, func(a, b claimedRow) int { return cmp.Compare(a.seq, b.seq) })
	}
	var cut map[aggregateKey]bool // ordered mode: aggregates with an undecodable row in this batch
	n := 0                        // msgs[:n] are the messages to publish
	for i, m := range msgs {
		k := keyOf(m)
		if b.cfg.Mode == Ordered {
			if cut[k] {
				c.skipped = append(c.skipped, m)
				continue
			}
		}
		if string(headers[i]) == "{}" {
			// the common case: no headers, nothing to decode
		} else if err := json.Unmarshal(headers[i], &m.Headers); err != nil {
			c.bad = append(c.bad, badRow{m, "undecodable row: headers must be a JSON object of strings: " + err.Error()})
			if b.cfg.Mode == Ordered {
				if cut == nil {
					cut = map[aggregateKey]bool{}
				}
				cut[k] = true
			}
			continue
		}
		msgs[n] = m
		n++
	}
	c.msgs = msgs[:n]
	return c
}

// sortBySeq returns msgs and their headers sorted by seq.
func sortBySeq(msgs []outbox.Message, headers [][]byte) ([]outbox.Message, [][]byte) {
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(msgs[a].Seq, msgs[b].Seq) })
	sortedMsgs, sortedHeaders := make([]outbox.Message, len(msgs)), make([][]byte, len(msgs))
	for i, o := range order {
		sortedMsgs[i], sortedHeaders[i] = msgs[o], headers[o]
	}
	return sortedMsgs, sortedHeaders
}

// badRow is a claimed row that cannot become a message.
type badRow struct {
	msg    outbox.Message
	reason string
}

// cut reports whether an ordered claim of msgs may have left events waiting: it took as
// many heads as it may (allHeads), or some aggregate brought as many events as its cut
// allows (MaxPerAggregate, or maxEvents shared among the heads), so more of it may be
// pending (deep).
func (b *batcher) cut(msgs []outbox.Message, heads, maxEvents int) (allHeads, deep bool) {
	per := make(map[aggregateKey]int, len(msgs))
	for _, m := range msgs {
		per[keyOf(m)]++
	}
	limit := min(b.cfg.MaxPerAggregate, maxEvents/max(1, len(per)))
	for _, n := range per {
		if n >= limit {
			deep = true
			break
		}
	}
	return len(per) >= heads, deep
}
