package outbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/internal/sqlq"
)

// ErrNotMigrated is matched (errors.Is) by the error Enqueue, the relay and the inbox
// return when the schema's tables, columns or functions do not exist: the database was
// never migrated, or not to this version. The message names the schema and the fix
// (`outbox migrate`, or outboxmigrate.Migrate).
var ErrNotMigrated = sqlq.ErrNotMigrated

// ErrInvalidEvent is matched (errors.Is) by every [ValidationError].
var ErrInvalidEvent = errors.New("invalid event")

// ErrDuplicateID is matched by a [ConflictError] whose events' ids already exist.
var ErrDuplicateID = errors.New("event id already exists")

// ErrVersionConflict is matched by a [ConflictError] whose events' aggregate versions
// were already written by another event.
var ErrVersionConflict = errors.New("aggregate version already exists")

// ErrAggregateLockDeadlock is matched by the error Enqueue returns when PostgreSQL broke a
// deadlock by aborting the caller's transaction while Enqueue waited for an aggregate's
// lock: this transaction and another each held an aggregate the other was writing. Within
// one Enqueue call the locks are taken in key order, so it comes from events of several
// aggregates written by separate calls, in orders two transactions reverse (Enqueue(A)
// then Enqueue(B) here, Enqueue(B) then Enqueue(A) there). The transaction is aborted:
// roll it back and retry it; to avoid it, write a transaction's events in one call, or
// its aggregates in one consistent order.
var ErrAggregateLockDeadlock = errors.New("deadlock on aggregate locks")

// ValidationError is returned by Enqueue for an event that would be refused. Nothing
// of the call was written, and the caller's transaction is untouched.
type ValidationError struct {
	// Index is the position of the event in the Enqueue call.
	Index int
	// Field is the name of the Event field at fault, e.g. "AggregateID" or "Headers[x-id]".
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidEvent].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidEvent }

// ConflictError is returned by Enqueue when some events were not written because
// their id or their aggregate version already exists. The other events of the call
// were written, and the caller's transaction stays usable: commit it (the conflicting
// events already exist) or roll it back.
type ConflictError struct {
	// DuplicateIDs are the events whose id already exists.
	DuplicateIDs []uuid.UUID
	// VersionConflicts are the events whose (aggregate, version) already exists.
	VersionConflicts []uuid.UUID
}

func (e *ConflictError) Error() string {
	var parts []string
	if len(e.DuplicateIDs) > 0 {
		parts = append(parts, fmt.Sprintf("%s: %s", ErrDuplicateID, joinIDs(e.DuplicateIDs)))
	}
	if len(e.VersionConflicts) > 0 {
		parts = append(parts, fmt.Sprintf("%s: event %s", ErrVersionConflict, joinIDs(e.VersionConflicts)))
	}
	return "enqueue: " + strings.Join(parts, "; ")
}

// Is reports whether target is [ErrDuplicateID] or [ErrVersionConflict] and this error
// holds events of that kind.
func (e *ConflictError) Is(target error) bool {
	switch target {
	case ErrDuplicateID:
		return len(e.DuplicateIDs) > 0
	case ErrVersionConflict:
		return len(e.VersionConflicts) > 0
	}
	return false
}

func joinIDs(ids []uuid.UUID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, ", ")
}
