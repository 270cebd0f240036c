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

// rowOutcomes are settle_keep.sql's parameters, bound by name, one element per row:
// seq, outcome, error (nil: keep the last one) and delay.
type rowOutcomes struct {
	Seqs     []int64   `sql:"seqs"`
	Outcomes []string  `sql:"outcomes"`
	Errors   []*string `sql:"errors"`
	DelaysMS []int64   `sql:"delays_ms"`
}

func (r *rowOutcomes) add(seq int64, o outcome, err *string, delayMS int64) {
	r.Seqs = append(r.Seqs, seq)
	r.Outcomes = append(r.Outcomes, string(o))
	r.Errors = append(r.Errors, err)
	r.DelaysMS = append(r.DelaysMS, delayMS)
}

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

// rowColumns are the columns of events rows as parameters, one element per row, in
// the names settle_delete.sql and emitted_write.sql give them.
type rowColumns struct {
	IDs            [][16]byte  `sql:"ids"`
	AggTypes       []string    `sql:"aggregate_types"`
	AggIDs         []string    `sql:"aggregate_ids"`
	Versions       []int64     `sql:"aggregate_versions"`
	EventTypes     []string    `sql:"event_types"`
	SchemaVersions []int32     `sql:"schema_versions"`
	Topics         []string    `sql:"topics"`
	Headers        []string    `sql:"headers"`
	ContentTypes   []string    `sql:"content_types"`
	Payloads       [][]byte    `sql:"payloads"`
	TraceParents   []*string   `sql:"trace_parents"`
	PayloadJSON    []bool      `sql:"payload_is_json"`
	CreatedAt      []time.Time `sql:"created_at"`
	AvailableAt    []time.Time `sql:"available_at"`
}

// add adds m's row: its headers as JSON text, its traceparent as stored, whether its
// payload is JSON, and when it is available.
func (r *rowColumns) add(m *outbox.Message, headers string, traceParent *string, payloadJSON bool, availableAt time.Time) {
	r.IDs, r.AggTypes, r.AggIDs = append(r.IDs, m.ID), append(r.AggTypes, m.AggregateType), append(r.AggIDs, m.AggregateID)
	r.Versions, r.EventTypes = append(r.Versions, m.AggregateVersion), append(r.EventTypes, m.EventType)
	r.SchemaVersions = append(r.SchemaVersions, int32(m.SchemaVersion)) //nolint:gosec // from an int column, or validated by the Writer
	r.Topics, r.Headers, r.ContentTypes = append(r.Topics, m.Topic), append(r.Headers, headers), append(r.ContentTypes, m.ContentType)
	r.Payloads, r.TraceParents, r.PayloadJSON = append(r.Payloads, m.Payload), append(r.TraceParents, traceParent), append(r.PayloadJSON, payloadJSON)
	r.CreatedAt, r.AvailableAt = append(r.CreatedAt, m.CreatedAt), append(r.AvailableAt, availableAt)
}

// deletedRows are settle_delete.sql's parameters, bound by name: every column of each
// row as it was claimed (the seqs are the outcomes'), then its outcome.
type deletedRows struct {
	Columns    rowColumns  `sql:",inline"`
	Attempts   []int32     `sql:"attempts"`
	LastErrors []*string   `sql:"last_errors"`
	Outcomes   rowOutcomes `sql:",inline"`
}

// add adds m, claimed as c, with its outcome.
func (d *deletedRows) add(m outbox.Message, c claimedRow, o outcome, err *string, delayMS int64) {
	d.Columns.add(&m, string(c.headers), c.traceParent, c.payloadJSON, c.availableAt)
	d.Attempts, d.LastErrors = append(d.Attempts, int32(c.attempts)), append(d.LastErrors, c.lastError) //nolint:gosec // from an int column
	d.Outcomes.add(m.Seq, o, err, delayMS)
}

// settleArgs returns the arguments of the settle statement (settle_keep.sql or
// settle_delete.sql, b.q.settle) that puts back, in the claim transaction, every row of
// a batch whose message was not published (the claim marked, or deleted, them all as
// published), or nil when there is none. Each goes back with its outcome; a row classify
// said nothing of (never sent, skipped, an outage) goes back untouched.
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
	settled := make(map[int64]decided, len(o.Seqs))
	for i, seq := range o.Seqs {
		settled[seq] = decided{outcome(o.Outcomes[i]), o.Errors[i], o.DelaysMS[i]}
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
		deleted.add(m, c.rows[j], d.o, d.err, d.delayMS)
	}
	switch {
	case del && len(deleted.Outcomes.Seqs) > 0:
		return b.q.settleDelete.Args(&deleted)
	case !del && len(back.Seqs) > 0:
		return b.q.settleKeep.Args(&back)
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
