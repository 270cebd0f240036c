package relay

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox"
)

// claimedRow is what delete-on-publish keeps of a claimed row, beyond its message, to
// put it back whole when it is not published (unclaim_delete.sql needs every column).
type claimedRow struct {
	seq         int64
	headers     []byte  // as stored (JSON text)
	traceParent *string // as stored
	attempts    int     // before the claim
	availableAt time.Time
	lastError   *string
	payloadJSON bool // the payload is jsonb, not bytea
}

// unclaimArgs returns the arguments of the unclaim statement that puts back, in the
// claim transaction, every row of a batch whose message was not published (the claim
// statement marked, or deleted, them all as published), or nil when there is none. Each
// goes back with its outcome: a retry, dead, or untouched (never sent, skipped, or the
// sink was down: back to pending, no attempt counted).
func (r *Relay) unclaimArgs(c claimedBatch, out settlement) []any {
	if out.published == len(c.msgs) && len(c.bad) == 0 && len(c.skipped) == 0 {
		return nil // the usual batch: everything went out
	}
	type outcome struct {
		name    string
		err     *string
		delayMS int64
	}
	settled := make(map[int64]outcome, len(out.seqs))
	for i, seq := range out.seqs {
		settled[seq] = outcome{out.outcomes[i], out.errs[i], out.delays[i]}
	}
	var back []outbox.Message
	var outcomes []outcome
	for _, m := range slices.Concat(c.msgs, badMessages(c.bad), c.skipped) {
		o, ok := settled[m.Seq]
		if !ok {
			o = outcome{name: "untouched"}
		}
		if o.name != "published" {
			back = append(back, m)
			outcomes = append(outcomes, o)
		}
	}
	if len(back) == 0 {
		return nil
	}
	n := len(back)
	seqs, names, errs, delays := make([]int64, n), make([]string, n), make([]*string, n), make([]int64, n)
	for i, m := range back {
		seqs[i], names[i], errs[i], delays[i] = m.Seq, outcomes[i].name, outcomes[i].err, outcomes[i].delayMS
	}
	if r.cfg.Retention.Mode == DeleteOnPublish {
		return deletedRowArgs(back, c.rows, names, errs, delays)
	}
	return []any{seqs, names, errs, delays}
}

func badMessages(bad []badRow) []outbox.Message {
	msgs := make([]outbox.Message, len(bad))
	for i, b := range bad {
		msgs[i] = b.msg
	}
	return msgs
}

// deletedRowArgs returns unclaim_delete.sql's parameters: every column of each row as
// it was claimed, then the outcome.
func deletedRowArgs(back []outbox.Message, claimed []claimedRow, outcomes []string, errs []*string, delays []int64) []any {
	n := len(back)
	var (
		seqs, versions                                              = make([]int64, n), make([]int64, n)
		ids                                                         = make([][16]byte, n)
		aggTypes, aggIDs, eventTypes, topics, headers, contentTypes = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		schemaVersions, attempts                                    = make([]int32, n), make([]int32, n)
		payloads                                                    = make([][]byte, n)
		traceParents, lastErrors                                    = make([]*string, n), make([]*string, n)
		payloadJSON                                                 = make([]bool, n)
		createdAt, availableAt                                      = make([]time.Time, n), make([]time.Time, n)
	)
	for i, m := range back {
		j, ok := slices.BinarySearchFunc(claimed, m.Seq, func(r claimedRow, seq int64) int { return cmp.Compare(r.seq, seq) })
		if !ok {
			panic(fmt.Sprintf("relay: no claimed row for event seq %d", m.Seq)) // every message came from a claimed row
		}
		c := claimed[j]
		seqs[i], ids[i], aggTypes[i], aggIDs[i], versions[i] = m.Seq, m.ID, m.AggregateType, m.AggregateID, m.AggregateVersion
		eventTypes[i], schemaVersions[i], topics[i], headers[i] = m.EventType, int32(m.SchemaVersion), m.Topic, string(c.headers) //nolint:gosec // from an int column
		contentTypes[i], payloads[i], traceParents[i], payloadJSON[i] = m.ContentType, m.Payload, c.traceParent, c.payloadJSON
		createdAt[i], availableAt[i], attempts[i], lastErrors[i] = m.CreatedAt, c.availableAt, int32(c.attempts), c.lastError //nolint:gosec // from an int column
	}
	return []any{
		seqs, ids, aggTypes, aggIDs, versions, eventTypes, schemaVersions, topics, headers, contentTypes,
		payloads, traceParents, payloadJSON, createdAt, availableAt, attempts, lastErrors, outcomes, errs, delays,
	}
}
