package outbox

import (
	"time"

	"github.com/google/uuid"
)

// ContentTypeJSON is the default content type of an event's payload.
const ContentTypeJSON = "application/json"

// Event is one event to enqueue. AggregateType, AggregateID and EventType are
// required; every other field has a default.
type Event struct {
	// ID is the event's identity, sent as the message id and used by consumers to
	// deduplicate. Default: a new UUIDv7 (time-ordered).
	ID uuid.UUID
	// AggregateType names the kind of entity the event is about, e.g. "order". Required;
	// at most 255 bytes of UTF-8 without whitespace, control characters or the wildcards
	// * and > (it becomes part of topics, subjects and routing keys).
	AggregateType string
	// AggregateID identifies the entity within its type. Required; at most 1024 bytes of
	// UTF-8 without control characters (it becomes a header and a message key). Events of
	// one (AggregateType, AggregateID) are published in write order.
	AggregateID string
	// AggregateVersion is the entity's version after this event, unique per aggregate.
	// Default 0: no version. When set it must be ≥ 1; a second event with the same
	// version of the same aggregate is refused with [ErrVersionConflict].
	AggregateVersion int64
	// EventType names what happened, e.g. "order.created". Required; the rules of
	// AggregateType.
	EventType string
	// SchemaVersion is the version of the payload's schema, between 1 and 2³¹−1.
	// Default 1.
	SchemaVersion int
	// Topic overrides the sink's topic, subject or routing key. At most 249 bytes of ASCII
	// letters, digits, '_' and '-', in tokens separated by single dots: what every broker
	// takes as it is. Default: the sink decides.
	Topic string
	// Headers are sent with the message. Names are HTTP-token characters; values are
	// printable UTF-8 without CR, LF or NUL. Default: none.
	Headers map[string]string
	// ContentType of Payload: a media type (type/subtype, optional parameters) in
	// printable ASCII. Default [ContentTypeJSON]. Payloads of JSON content types
	// ("application/json" and any "…+json") must be JSON that PostgreSQL's jsonb would
	// accept too; anything else is stored as bytes. Either way the sink receives the
	// payload byte for byte as written.
	ContentType string
	// Payload is the event's body. Default: none.
	Payload []byte
	// TraceParent is a W3C traceparent (lowercase hex) to link the relay's and consumers'
	// spans to the producer's. Default: none.
	TraceParent string
	// AvailableAt delays delivery until then (a time in years 1 to 9999). Default: now
	// (the transaction's time). A relay whose claims see the event among the first 64
	// pending ones wakes when it comes due; else it goes out at the relay's next poll. In
	// the relay's ordered mode a delayed event is still its aggregate's next event: the
	// aggregate's later events wait for it (delay a whole aggregate, or give a reminder
	// an aggregate of its own).
	AvailableAt time.Time
}

// NewID returns a new UUIDv7, the kind of id Enqueue assigns when Event.ID is zero.
// Set Event.ID to it when the caller needs the id before the event is written.
func NewID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}
