package relay

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox"
)

// outcome is what settling does to a claimed row whose message was not published; the
// settle statements (settle_keep.sql, settle_delete.sql) take it by these names.
type outcome string

const (
	// outcomePublished: the sink took it; the claim's mark stands (nothing to settle).
	outcomePublished outcome = "published"
	// outcomeRetry: pending again after a delay, the attempt counted.
	outcomeRetry outcome = "retry"
	// outcomeDead: out of attempts, or refused for good: dead with the reason.
	outcomeDead outcome = "dead"
	// outcomeDeferred: the sink was down for it while others went out: pending again
	// after a delay, no attempt counted.
	outcomeDeferred outcome = "deferred"
	// outcomeUntouched: never sent (behind a failed predecessor, skipped, the sink
	// down): pending again as it was, no attempt counted.
	outcomeUntouched outcome = "untouched"
	// outcomeHeld: its Publish call still runs after the batch (publish.go): pending,
	// not available until the call has had its time, no attempt counted yet;
	// settle_late.sql settles it when the call returns.
	outcomeHeld outcome = "held"
)

// rowOutcomes are settle_keep.sql's parameters, one element per row: seq, outcome,
// error (nil: keep the last one) and delay.
type rowOutcomes struct {
	seqs     []int64
	outcomes []string
	errs     []*string
	delaysMS []int64
}

func (r *rowOutcomes) add(seq int64, o outcome, err *string, delayMS int64) {
	r.seqs = append(r.seqs, seq)
	r.outcomes = append(r.outcomes, string(o))
	r.errs = append(r.errs, err)
	r.delaysMS = append(r.delaysMS, delayMS)
}

// args are the parameters of settle_keep.sql, in its order.
func (r *rowOutcomes) args() []any { return []any{r.seqs, r.outcomes, r.errs, r.delaysMS} }

// claimedRow is what delete-on-publish keeps of a claimed row, beyond its message, to
// put it back whole when it is not published (settle_delete.sql needs every column).
type claimedRow struct {
	seq         int64
	headers     []byte  // as stored (JSON text)
	traceParent *string // as stored
	attempts    int     // before the claim
	availableAt time.Time
	lastError   *string
	payloadJSON bool // the payload is JSON (the payload column), not bytes (payload_bytes)
}

// deletedRows are settle_delete.sql's parameters: every column of each row as it was
// claimed, then its outcome.
type deletedRows struct {
	seqs, versions                                              []int64
	ids                                                         [][16]byte
	aggTypes, aggIDs, eventTypes, topics, headers, contentTypes []string
	schemaVersions, attempts                                    []int32
	payloads                                                    [][]byte
	traceParents, lastErrors                                    []*string
	payloadJSON                                                 []bool
	createdAt, availableAt                                      []time.Time
	outcomes                                                    rowOutcomes
}

func (d *deletedRows) add(m outbox.Message, c claimedRow) {
	d.seqs, d.ids, d.aggTypes, d.aggIDs = append(d.seqs, m.Seq), append(d.ids, m.ID), append(d.aggTypes, m.AggregateType), append(d.aggIDs, m.AggregateID)
	d.versions, d.eventTypes = append(d.versions, m.AggregateVersion), append(d.eventTypes, m.EventType)
	d.schemaVersions = append(d.schemaVersions, int32(m.SchemaVersion)) //nolint:gosec // from an int column
	d.topics, d.headers, d.contentTypes = append(d.topics, m.Topic), append(d.headers, string(c.headers)), append(d.contentTypes, m.ContentType)
	d.payloads, d.traceParents, d.payloadJSON = append(d.payloads, m.Payload), append(d.traceParents, c.traceParent), append(d.payloadJSON, c.payloadJSON)
	d.createdAt, d.availableAt = append(d.createdAt, m.CreatedAt), append(d.availableAt, c.availableAt)
	d.attempts, d.lastErrors = append(d.attempts, int32(c.attempts)), append(d.lastErrors, c.lastError) //nolint:gosec // from an int column
}

// args are the parameters of settle_delete.sql, in its order.
func (d *deletedRows) args() []any {
	return []any{
		d.seqs, d.ids, d.aggTypes, d.aggIDs, d.versions, d.eventTypes, d.schemaVersions, d.topics, d.headers, d.contentTypes,
		d.payloads, d.traceParents, d.payloadJSON, d.createdAt, d.availableAt, d.attempts, d.lastErrors,
		d.outcomes.outcomes, d.outcomes.errs, d.outcomes.delaysMS,
	}
}

// settleArgs returns the arguments of the settle statement that puts back, in the claim
// transaction, every row of a batch whose message was not published (the claim marked,
// or deleted, them all as published), or nil when there is none. Each goes back with
// its outcome; a row classify said nothing of (never sent, skipped, an outage) goes back
// untouched.
func (b *batcher) settleArgs(c claimedBatch, out settlement) []any {
	if out.published == len(c.msgs) && len(c.bad) == 0 && len(c.skipped) == 0 {
		return nil // the usual batch: everything went out
	}
	type decided struct {
		o       outcome
		err     *string
		delayMS int64
	}
	o := out.outcomes
	settled := make(map[int64]decided, len(o.seqs))
	for i, seq := range o.seqs {
		settled[seq] = decided{outcome(o.outcomes[i]), o.errs[i], o.delaysMS[i]}
	}
	var back rowOutcomes
	var deleted deletedRows
	del := deletes(b.cfg.Retention.Mode)
	for _, m := range slices.Concat(c.msgs, badMessages(c.bad), c.skipped) {
		d, ok := settled[m.Seq]
		if !ok {
			d = decided{o: outcomeUntouched}
		}
		if d.o == outcomePublished {
			continue
		}
		if !del {
			back.add(m.Seq, d.o, d.err, d.delayMS)
			continue
		}
		j, ok := slices.BinarySearchFunc(c.rows, m.Seq, func(r claimedRow, seq int64) int { return cmp.Compare(r.seq, seq) })
		if !ok {
			panic(fmt.Sprintf("relay: no claimed row for event seq %d", m.Seq)) // every message came from a claimed row
		}
		deleted.add(m, c.rows[j])
		deleted.outcomes.add(m.Seq, d.o, d.err, d.delayMS)
	}
	switch {
	case del && len(deleted.seqs) > 0:
		return deleted.args()
	case !del && len(back.seqs) > 0:
		return back.args()
	}
	return nil
}

func badMessages(bad []badRow) []outbox.Message {
	msgs := make([]outbox.Message, len(bad))
	for i, r := range bad {
		msgs[i] = r.msg
	}
	return msgs
}
