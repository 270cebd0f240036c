package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/internal/emitted"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// DefaultMaxPayloadBytes is the default WriterConfig.MaxPayloadBytes: 900 KiB, below the
// 1 MiB that NATS and Kafka accept by default once headers are added.
const DefaultMaxPayloadBytes = 900 << 10

// WriterConfig configures a [Writer]. The zero value (or nil) means the defaults.
type WriterConfig struct {
	// Schema is the PostgreSQL schema holding the outbox tables, as created by
	// outboxmigrate. Default "outbox".
	Schema string
	// MaxPayloadBytes refuses larger payloads at Enqueue. Default [DefaultMaxPayloadBytes].
	MaxPayloadBytes int
	// DisableAggregateLock turns off the transaction-scoped advisory lock that Enqueue
	// takes per aggregate. With the lock (the default), two transactions writing one
	// aggregate commit in seq order, so the relay publishes them in commit order.
	// Turn it off only when the caller already serialises writers of an aggregate,
	// e.g. by locking the aggregate's business row (SELECT … FOR UPDATE) first.
	DisableAggregateLock bool
	// Slot is the replication slot of the schema's CDC reader (cdc.Config.Slot), which
	// reads what [Writer.Emit] writes: Emit writes only while it exists and has not lost
	// its WAL. Default "outbox_cdc_<schema>", the reader's default.
	Slot string
}

// Writer enqueues events into the caller's transaction. It is safe for concurrent use.
type Writer struct {
	schema     string // named in errors
	maxPayload int
	lock       bool
	slot       string // Emit's reader
	stmts      enqueueStatements
}

// NewWriter returns a Writer for cfg; nil means the defaults.
func NewWriter(cfg *WriterConfig) (*Writer, error) {
	if cfg == nil {
		cfg = &WriterConfig{}
	}
	schema := sqlq.DefaultSchema
	if cfg.Schema != "" {
		schema = cfg.Schema
	}
	quoted, err := sqlq.QuoteSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("WriterConfig.Schema: %w", err)
	}
	maxPayload := DefaultMaxPayloadBytes
	switch {
	case cfg.MaxPayloadBytes < 0:
		return nil, fmt.Errorf("WriterConfig.MaxPayloadBytes must not be negative, got %d", cfg.MaxPayloadBytes)
	case cfg.MaxPayloadBytes > 0:
		maxPayload = cfg.MaxPayloadBytes
	}
	return &Writer{
		schema:     schema,
		maxPayload: maxPayload,
		lock:       !cfg.DisableAggregateLock,
		slot:       cmp.Or(cfg.Slot, emitted.DefaultSlot(schema)),
		stmts:      newEnqueueStatements(quoted),
	}, nil
}

var defaultWriter = func() *Writer {
	w, err := NewWriter(nil)
	if err != nil {
		panic(err)
	}
	return w
}()

// Enqueue writes events into tx with the default Writer (schema "outbox"). See
// [Writer.Enqueue].
func Enqueue(ctx context.Context, tx Tx, events ...Event) error {
	return defaultWriter.Enqueue(ctx, tx, events...)
}

// Enqueue writes events into the caller's transaction tx, all in one statement and one
// round trip. They are published after tx commits, and never if it rolls back.
//
// Every event is validated first; an invalid one is refused with a [*ValidationError]
// naming the field, and nothing is written. An event whose ID or aggregate version
// already exists is skipped and reported in a [*ConflictError] (errors.Is with
// [ErrDuplicateID] or [ErrVersionConflict]) while the others are written. In both
// cases tx stays usable. Enqueue never begins, commits or rolls back tx.
//
// Unless [WriterConfig.DisableAggregateLock] is set, Enqueue takes a transaction-scoped
// lock on each aggregate it writes, sorted within the call; events of several aggregates
// written by separate calls, in orders another transaction reverses, can deadlock: the
// error then matches [ErrAggregateLockDeadlock] and the transaction must be retried.
//
// An event's ID deduplicates only while its row exists: once the relay deletes it
// (delete-on-publish) or retention purges it, the same ID is accepted, and published,
// again. A producer that may retry a transaction across that window stays safe because
// consumers deduplicate by ID too (the inbox).
func (w *Writer) Enqueue(ctx context.Context, tx Tx, events ...Event) error {
	if tx == nil {
		return errNilTx
	}
	if len(events) == 0 {
		return nil
	}
	valid, ids, mayConflict, err := w.validateAll(events)
	if err != nil {
		return err
	}
	stmt, args := w.stmts.bind(tx.encode(valid, w.lock))
	if !mayConflict {
		if err := tx.exec(ctx, stmt.plain, args...); err != nil {
			return insertError(w.schema, len(events), err)
		}
		return nil
	}
	inserted, err := tx.queryStrings(ctx, stmt.arbiter, args...)
	if err != nil {
		return insertError(w.schema, len(events), err)
	}
	if len(inserted) == len(events) {
		return nil
	}
	return w.conflicts(ctx, tx, ids, inserted)
}

// validateAll validates the events of one call (validate, and no id or aggregate
// version twice) and returns them with defaults filled, their ids, and whether any of
// them may conflict with a row already written (a caller-supplied id or a version).
func (w *Writer) validateAll(events []Event) (valid []Event, ids []uuid.UUID, mayConflict bool, err error) {
	valid = make([]Event, len(events))
	ids = make([]uuid.UUID, len(events))
	seen := make(map[uuid.UUID]int, len(events))
	type versionKey struct {
		aggregateType, aggregateID string
		version                    int64
	}
	var seenVersions map[versionKey]int
	for i, e := range events {
		mayConflict = mayConflict || e.ID != uuid.Nil || e.AggregateVersion > 0
		e, err := w.validate(i, e)
		if err != nil {
			return nil, nil, false, err
		}
		if j, dup := seen[e.ID]; dup {
			return nil, nil, false, &ValidationError{Index: i, Field: "ID", Reason: fmt.Sprintf("repeats the id of event %d in this call", j)}
		}
		seen[e.ID] = i
		if e.AggregateVersion > 0 {
			if seenVersions == nil {
				seenVersions = map[versionKey]int{}
			}
			k := versionKey{e.AggregateType, e.AggregateID, e.AggregateVersion}
			if j, dup := seenVersions[k]; dup {
				return nil, nil, false, &ValidationError{Index: i, Field: "AggregateVersion", Reason: fmt.Sprintf("repeats the aggregate version of event %d in this call", j)}
			}
			seenVersions[k] = i
		}
		valid[i], ids[i] = e, e.ID
	}
	return valid, ids, mayConflict, nil
}

// conflicts explains which events ON CONFLICT DO NOTHING skipped, and why.
func (w *Writer) conflicts(ctx context.Context, tx Tx, ids []uuid.UUID, inserted []string) error {
	done := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		done[id] = true
	}
	var skipped []string
	for _, u := range ids {
		if id := u.String(); !done[id] {
			skipped = append(skipped, id)
		}
	}
	arg, err := json.Marshal(skipped)
	if err != nil {
		return fmt.Errorf("enqueue: encode skipped ids: %w", err)
	}
	existing, err := tx.queryStrings(ctx, w.stmts.conflicts.SQL, w.stmts.conflicts.Args(&conflictsParams{IDs: string(arg)})...)
	if err != nil {
		return fmt.Errorf("enqueue: look up conflicting events: %w", err)
	}
	dup := make(map[string]bool, len(existing))
	for _, id := range existing {
		dup[id] = true
	}
	cerr := &ConflictError{}
	for _, id := range skipped {
		u := uuid.MustParse(id)
		if dup[id] {
			cerr.DuplicateIDs = append(cerr.DuplicateIDs, u)
		} else {
			cerr.VersionConflicts = append(cerr.VersionConflicts, u)
		}
	}
	return cerr
}

// insertError wraps a failed enqueue statement, saying what a deadlock and a schema never
// migrated mean.
func insertError(schema string, n int, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
		return fmt.Errorf("enqueue: insert %d events: %w: another transaction holds the lock of an aggregate this one is writing and waits for one this one holds — Enqueue calls of one transaction wrote aggregates in an order another transaction reversed; the transaction is aborted: roll it back and retry it, and write its events in one Enqueue call or its aggregates in a consistent order: %w",
			n, ErrAggregateLockDeadlock, err)
	}
	return fmt.Errorf("enqueue: insert %d events: %w", n, sqlq.NotMigrated(schema, err))
}
