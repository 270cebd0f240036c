package relay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
)

// claimedRow is what delete-on-publish in unordered mode keeps of a claimed row, beyond
// its message, to put it back whole when it is not published (unclaim_delete.sql needs
// every column).
type claimedRow struct {
	headers     []byte  // as stored (JSON text)
	traceParent *string // as stored
	attempts    int     // before the claim
	availableAt time.Time
	lastError   *string
	payloadJSON bool // the payload is jsonb, not bytea
}

// unclaim puts back, in the claim transaction, every row of an unordered batch whose
// message was not published: the claim statement marked (or deleted) them all as
// published. Each goes back with its outcome: a retry, dead, or untouched (never sent,
// or the sink was down: back to pending, no attempt counted).
func (r *Relay) unclaim(ctx context.Context, tx pgx.Tx, msgs []outbox.Message, bad []badRow, claimed map[int64]claimedRow, out settlement) error {
	if out.published == len(msgs) && len(bad) == 0 {
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
	var back []outbox.Message // in batch order: messages first, then undecodable rows
	var outcomes []outcome
	for _, m := range slices.Concat(msgs, badMessages(bad)) {
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
	args := []any{seqs, names, errs, delays}
	if r.cfg.Retention.Mode == DeleteOnPublish {
		args = deletedRowArgs(back, claimed, names, errs, delays)
	}
	if _, err := tx.Exec(ctx, r.q.unclaim, args...); err != nil {
		return fmt.Errorf("put back %d unpublished events: %w", n, err)
	}
	return nil
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
func deletedRowArgs(back []outbox.Message, claimed map[int64]claimedRow, outcomes []string, errs []*string, delays []int64) []any {
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
		c := claimed[m.Seq]
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
