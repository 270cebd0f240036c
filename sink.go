package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
)

// Message is one event as the relay hands it to a [Sink].
type Message struct {
	// ID is the event's identity: send it as the broker's message id / dedup key.
	ID uuid.UUID
	// Seq is the event's write order.
	Seq              int64
	AggregateType    string
	AggregateID      string
	AggregateVersion int64 // 0: none
	EventType        string
	SchemaVersion    int
	// Topic is the event's topic override; empty means the sink's default routing.
	Topic       string
	Headers     map[string]string
	ContentType string
	Payload     []byte
	TraceParent string
	CreatedAt   time.Time
	// Attempt is 1 for the first publish attempt of this event, 2 for the next, and so on.
	Attempt int
}

// Sink publishes messages to a broker. It is the relay's only view of the broker.
//
// The contract, which package sinktest checks for every sink:
//   - Publish returns exactly one result per message, in the same order; nil means the
//     broker acknowledged that message. An empty msgs returns no results and sends nothing.
//   - Messages of one aggregate (AggregateType, AggregateID) appear in msgs in write
//     order and must reach the broker in that order. When one of them fails, no later
//     message of that aggregate in the call may reach the broker: return [ErrNotSent]
//     for them (a sink that pipelines within an aggregate must make sure the broker
//     drops the later ones). Messages of different aggregates may be published
//     concurrently.
//   - Wrap an error with [Permanent] when retrying cannot help (too large, unroutable,
//     refused by the broker's schema); with [Unavailable] when the broker as a whole
//     cannot be reached (connection refused, no leader, a failing file). Plain errors
//     are transient for that message.
//   - Publish honours ctx: when it is done, return promptly; messages without an ack
//     fail with an error wrapping ctx.Err() (the relay counts no attempt for them).
//   - Publish may be called from several goroutines at once; the relay never has two
//     calls in flight with messages of the same aggregate. Publish must not modify
//     msgs, nor keep them (or their Payload and Headers) after it returns.
//   - A sink whose ack is weaker than "durable at the broker" (a file sink that does not
//     fsync) says so in its documentation.
//   - When ctx is marked [WithoutOrder] (an unordered relay marks each of its calls), the
//     order point above does not hold: the caller needs no order, so a sink may send
//     every message at once and a failure stops no other message ([ErrNotSent] is then
//     never needed).
type Sink interface {
	Publish(ctx context.Context, msgs []Message) []error
}

type withoutOrderKey struct{}

// WithoutOrder returns a copy of ctx that tells a [Sink]'s Publish its caller needs no
// order among the messages of the call, not even within an aggregate: an unordered
// relay passes it, so a pipelining sink sends a whole call at once instead of one wave
// per position in an aggregate.
func WithoutOrder(ctx context.Context) context.Context {
	return context.WithValue(ctx, withoutOrderKey{}, true)
}

// OrderNeeded reports whether a Publish call with ctx must keep its messages' order
// within each aggregate: true unless ctx was marked with [WithoutOrder].
func OrderNeeded(ctx context.Context) bool {
	unordered, _ := ctx.Value(withoutOrderKey{}).(bool)
	return !unordered
}

// ErrNotSent is the result for a message a sink did not try to send because an
// earlier message of the same aggregate failed in the same call.
var ErrNotSent = errors.New("not sent: an earlier message of the same aggregate failed")

type permanentError struct{ err error }

func (e permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: retrying the message cannot succeed. The relay
// counts the attempt and parks the event as dead (with err as its reason) at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked with [Permanent].
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

type unavailableError struct{ err error }

func (e unavailableError) Error() string { return "sink unavailable: " + e.err.Error() }
func (e unavailableError) Unwrap() error { return e.err }

// Unavailable marks err as a failure of the whole sink (broker down, connection
// refused), not of one message. The relay counts no attempt, opens its breaker and
// probes until the sink is back.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return unavailableError{err}
}

// IsUnavailable reports whether err was marked with [Unavailable].
func IsUnavailable(err error) bool {
	var u unavailableError
	return errors.As(err, &u)
}

type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e retryAfterError) Error() string {
	return e.err.Error() + " (retry after " + e.delay.String() + ")"
}
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as a transient failure of the message for which the broker asked
// to be left alone for d (an HTTP 429 or 503 with Retry-After, say): the relay counts
// the attempt and waits the longer of d and its own backoff before the next one.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return retryAfterError{err, d}
}

// RetryAfterOf returns the delay err asks for with [RetryAfter], if it does.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r retryAfterError
	if errors.As(err, &r) {
		return r.delay, true
	}
	return 0, false
}
