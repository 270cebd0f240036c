package inbox

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Outcome is what became of a processed event. Every outcome is final for the delivery:
// ack it once Process returned.
type Outcome int

const (
	// Applied means the handler ran and its work committed with the dedup record.
	Applied Outcome = iota + 1
	// Duplicate means the event was processed before (or is being, by a transaction that
	// committed first); nothing ran.
	Duplicate
	// Stale means the event's AggregateVersion is at or below the last applied one; nothing
	// ran.
	Stale
	// Parked means the event is past a gap (GapPark) and waits, stored, for the versions
	// before it.
	Parked
	// Quarantined means the event was stored in the quarantine with a reason (a schema not
	// accepted, a handler panic, a permanent handler error); its handler's work, if
	// any, was rolled back.
	Quarantined
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Stale:
		return "stale"
	case Parked:
		return "parked"
	case Quarantined:
		return "quarantined"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result says what [Consumer.Process] did with a message.
type Result struct {
	// Outcome is what became of the message itself.
	Outcome Outcome
	// Unparked lists the parked events of the aggregate that were applied after the
	// message, in version order, because it closed their gap.
	Unparked []uuid.UUID
	// Reason says why the message was quarantined (Outcome Quarantined), or why the
	// first parked event it did not apply was (Unparked then stops before it).
	Reason string
}

// ErrGap is matched (errors.Is) by a [GapError].
var ErrGap = errors.New("aggregate version gap")

// GapError is returned under [GapRetry] for an event past a gap in its aggregate's
// versions. Nothing was recorded: nak the message so the broker delivers it again
// later.
type GapError struct {
	// Last is the aggregate's last applied version; Version the event's.
	Last, Version int64
}

func (e *GapError) Error() string {
	return fmt.Sprintf("%s: aggregate at version %d, event has version %d (retry later)", ErrGap, e.Last, e.Version)
}

// Is reports whether target is [ErrGap].
func (e *GapError) Is(target error) bool { return target == ErrGap }

// ErrInvalidMessage is matched by a [MessageError].
var ErrInvalidMessage = errors.New("invalid message")

// MessageError is returned for a message Process cannot record (a zero id, text the
// database would refuse). Nothing ran and nothing was recorded; redelivery cannot
// help, so terminate the message or dead-letter it at the broker.
type MessageError struct {
	// Field is the outbox.Message field at fault, e.g. "ID" or "Headers[x-id]".
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("%s: msg.%s: %s", ErrInvalidMessage, e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidMessage].
func (e *MessageError) Is(target error) bool { return target == ErrInvalidMessage }

// ErrNotQuarantined is returned by [Consumer.Replay] for an event that is not in the
// consumer's quarantine (never quarantined, or already replayed).
var ErrNotQuarantined = errors.New("event is not in the quarantine")
