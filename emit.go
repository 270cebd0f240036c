package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/internal/emitted"
)

// ErrNoSlot is the error of [Writer.Emit] when the replication slot of the schema's CDC
// reader ([WriterConfig.Slot]) does not exist in the database or has lost its WAL: no one
// would read what Emit writes, so nothing is written.
var ErrNoSlot = errors.New("the CDC reader's replication slot does not exist or lost its WAL (start the reader, package cdc, first)")

// emitParams are the parameters of emit.sql, bound by name.
type emitParams struct {
	Prefix string `sql:"prefix"`
	Slot   string `sql:"slot"`
	Rows   string `sql:"rows"` // a JSON array of rows (newJSONParams)
}

// Emit writes events into tx with the default Writer (schema "outbox"). See
// [Writer.Emit].
func Emit(ctx context.Context, tx Tx, events ...Event) error {
	return defaultWriter.Emit(ctx, tx, events...)
}

// Emit writes events into the caller's transaction tx for a CDC relay in table-less
// mode: into the WAL only, as one logical decoding message (pg_logical_emit_message),
// with no row in the events table — no insert, no index entries, no update when it is
// published, nothing to vacuum. The schema's CDC reader (package cdc) publishes them
// after tx commits, in commit order, and never if tx rolls back.
//
// The events are validated as by [Writer.Enqueue], and an invalid one is refused with a
// [*ValidationError] naming the field. What a row would catch cannot be: an id or an
// aggregate version already written is not detected (consumers deduplicate by id). While
// the reader's slot ([WriterConfig.Slot]) does not exist (the reader creates it at its
// first start) or has lost its WAL, Emit writes nothing and returns an error matching
// [ErrNoSlot]. In each case tx stays usable. Emit takes no aggregate lock: the WAL is in
// commit order already.
//
// An event becomes a row only if it needs one: when its publish fails, or an earlier
// event of its aggregate is still pending or dead in the table, or it is scheduled
// (AvailableAt) or paused, the reader writes it to the events table, and the relay's
// retries, dead letters, replay and discard take it from there
// (docs/adr/0026-cdc-discovers-the-table-keeps-the-state.md says which guarantees
// table-less mode keeps). Until then `outbox status` does not count it: the slot's lag
// is its backlog.
func (w *Writer) Emit(ctx context.Context, tx Tx, events ...Event) error {
	if tx == nil {
		return errNilTx
	}
	if len(events) == 0 {
		return nil
	}
	valid, _, _, err := w.validateAll(events)
	if err != nil {
		return err
	}
	rows := newJSONParams(valid, false).Rows
	got, err := tx.queryStrings(ctx, w.stmts.emit.SQL, w.stmts.emit.Args(&emitParams{Prefix: emitted.Prefix(w.schema), Slot: w.slot, Rows: rows})...)
	if err != nil {
		return fmt.Errorf("emit %d events: %w", len(events), err)
	}
	if len(got) != 1 || got[0] == "" {
		return fmt.Errorf("emit %d events into schema %s: slot %s: %w", len(events), w.schema, w.slot, ErrNoSlot)
	}
	return nil
}
