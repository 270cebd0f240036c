package inbox

import (
	"fmt"
	"log/slog"
)

// GapPolicy says what [Consumer.Process] does with an event whose AggregateVersion is
// past the next one expected (last applied + 1).
type GapPolicy int

const (
	// GapPark stores the event in the park and acks it; when the missing versions
	// arrive, the event that closes the gap applies the parked events after itself, in
	// version order, in its own transaction. The default.
	GapPark GapPolicy = iota
	// GapApply applies the event and moves the aggregate's version to it: the missing
	// versions, when they arrive, are stale and skipped.
	GapApply
	// GapRetry refuses the event with a [GapError] (nothing is recorded): the caller
	// naks it and the broker delivers it again later, by when the gap may be closed.
	GapRetry
)

func (p GapPolicy) String() string {
	switch p {
	case GapPark:
		return "park"
	case GapApply:
		return "apply"
	case GapRetry:
		return "retry"
	}
	return fmt.Sprintf("GapPolicy(%d)", int(p))
}

// FirstVersion says what the first event seen for an aggregate is compared with.
type FirstVersion int

const (
	// FirstVersionOne means an aggregate never seen has applied nothing (last version 0), so
	// its first event must be version 1; a higher one is a gap. Right for a consumer
	// that sees every aggregate from its beginning. The default.
	FirstVersionOne FirstVersion = iota
	// FirstVersionAny means the first event seen for an aggregate is applied whatever its
	// version, and later ones continue from it. For a consumer that joins streams
	// midway (the earlier events were published before it existed, or purged). Its
	// cost: an aggregate whose first two events arrive out of order applies the later
	// one first, and the earlier one is then stale.
	FirstVersionAny
)

// Schema is an (event type, schema version) pair a consumer accepts.
type Schema struct {
	EventType     string
	SchemaVersion int
}

// Config configures a [Consumer].
type Config struct {
	// Name identifies the consumer: its dedup records, versions, parked and
	// quarantined events are its own. Required; 1 to 200 bytes of ASCII letters,
	// digits and . _ - : (it is also part of every idempotency key, so never rename a
	// consumer that is live).
	Name string
	// Schema is the database schema of the inbox tables. Default "outbox".
	Schema string
	// Gap is what to do with an event past a gap in its aggregate's versions. Default
	// [GapPark].
	Gap GapPolicy
	// FirstVersion is what the first event of an aggregate is compared with. Default
	// [FirstVersionOne].
	FirstVersion FirstVersion
	// Accept lists the (event type, schema version) pairs the consumer handles; an
	// event of another pair is quarantined without running the handler. Default: every
	// pair is accepted.
	Accept []Schema
	// Logger receives a warning for each quarantined event and debug lines for
	// skipped ones. Default: discard.
	Logger *slog.Logger
	// Observer, when set, is told what each Process, ProcessSQL, ProcessSQLTx and
	// Replay call did (for metrics: outcomes, counts, handler time, lag). Default: none.
	Observer Observer
}

const maxNameBytes = 200

// validateName checks a consumer name; field names it in the error.
func validateName(field, name string) error {
	if name == "" {
		return fmt.Errorf("%s is empty: name the consumer", field)
	}
	if len(name) > maxNameBytes {
		return fmt.Errorf("%s is %d bytes; at most %d are allowed", field, len(name), maxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':'
		if !ok {
			return fmt.Errorf("%s %q: byte %q at %d is not allowed (use ASCII letters, digits and . _ - :)", field, name, c, i)
		}
	}
	return nil
}
