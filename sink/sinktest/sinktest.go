// Package sinktest is the conformance suite every [outbox.Sink] passes.
//
// A sink's own test calls [Run] with a function that builds a fresh [Harness] — the
// sink under test, connected to a broker (or an isolated topic, stream or queue) of its
// own, and a way to read back what reached that broker — and with the [Features] the
// broker lacks:
//
//	func TestConformance(t *testing.T) {
//		sinktest.Run(t, func(t *testing.T) sinktest.Harness {
//			s := mysink.New(client, nil)
//			return sinktest.Harness{Sink: s, Received: func(ctx context.Context) ([]outbox.Message, error) {
//				return readTopic(ctx, client, topic)
//			}}
//		}, sinktest.Features{})
//	}
//
// Run runs one parallel subtest per check, each with a harness of its own. Every
// subtest also reads the broker back and fails when the broker holds a message that
// was never published, a message that arrived changed, or misses a message that
// Publish acknowledged. The checks, and the broken sink each one catches:
//
//   - Results: one result per message, nil for each on a healthy broker. Fails a sink
//     that returns too few or too many results, acks a message it did not deliver, or
//     reorders the caller's msgs slice.
//   - Order: 500 messages over 20 interleaved aggregates arrive in write order per
//     aggregate. Fails a sink that reorders messages of an aggregate (sends them
//     concurrently, or groups them by something other than the aggregate).
//   - Fields: id, event type, aggregate, version, schema version, content type,
//     traceparent and headers arrive intact, with Unicode and long values. Fails a sink
//     that drops or mangles any of them.
//   - Payloads: binary payloads (every byte value, NUL, invalid UTF-8, empty, large) and
//     JSON payloads arrive intact. Fails a sink that treats payloads as text.
//   - EmptyBatch: Publish with no messages returns no results and sends nothing.
//     Fails a sink that answers an empty batch with results, or breaks on it.
//   - CancelledContext: with ctx already cancelled, Publish returns promptly and fails
//     every message; the sink works again with a live ctx. Fails a sink that ignores
//     ctx or acks what it did not deliver.
//   - FailureStopsAggregate (needs [Harness.FailWhen]): when the broker refuses message
//     k of an aggregate, the earlier ones and other aggregates succeed, k and the later
//     ones of its aggregate fail, none of those later ones reaches the broker, and a
//     retry after the broker recovers delivers them in order. Fails a sink that keeps
//     sending an aggregate after one of its messages failed, or reports the refusal of
//     one message as the whole sink being unavailable.
//   - ResultsLineUp (needs [Harness.FailWhen]): with refusals scattered over a batch,
//     exactly the refused messages fail. Fails a sink whose results are not in the
//     order of msgs.
//   - PayloadTooLarge (needs [Features.MaxPayloadBytes]): a payload one byte over the
//     limit fails with an error marked [outbox.Permanent], and stops its aggregate.
//   - FailureMidBatch (needs [Harness.FailWhen]): long runs of interleaved aggregates,
//     each refused in its middle: nothing after the refusal reaches the broker. Fails a
//     sink that pipelines an aggregate's messages past a refused one.
//   - HeaderValues: headers that would pose as the event's attributes or break a header
//     line (CR LF, NUL, a reserved name, a value over a broker's limit) are delivered
//     intact or refused with [outbox.Permanent], never injected or turned into
//     another event; other aggregates flow. Fails a sink that lets a header override
//     the event id, or reports such a header as a transient failure.
//   - MessageIDs (needs [Harness.MessageIDs]): the broker's message id of every message
//     is its event id. Fails a sink that leaves the broker to pick one.
//   - Outage (needs [Harness.SetDown]): with the broker unreachable, Publish fails every
//     message within [Harness.OutageTimeout], each with an error marked
//     [outbox.Unavailable] (or its ctx's error once ctx is done), and nothing reaches
//     the broker; once it is back the same sink delivers everything, in order. Fails a
//     sink that turns an outage into per-message failures (which the relay would count
//     as attempts, then dead letters), waits an outage out, or never recovers.
//   - Concurrent: Publish calls from several goroutines at once all succeed, in order
//     per aggregate. Run the suite with -race: it fails a sink with a data race.
//
// Beyond the checks, [RelayDelivers], [RelayOutage] and [RelayRejects] run the relay
// end to end through the sink, on a [RelayHarness]: every event delivered once and in
// order, an outage that the breaker holds without counting attempts, a refused event
// that goes dead with its reason while the others flow. [CheckDelivered] compares
// what an independent consumer read with what was written; [Reroute] and [Refusals]
// help a harness isolate its subtests and make a real broker refuse a message;
// [PoolRelayHarness] builds a RelayHarness over a pgx pool, [ProxySetDown] a SetDown
// over a proxy, and [RelayHarness.Start] and [RelayHarness.WaitPublished] serve a sink's
// own end-to-end scenarios.
//
// A check skipped for lack of a harness feature says which one in its skip message.
// The suite's own tests run every check against a sink broken in the way above and
// expect that check to fail.
package sinktest

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
)

// LargePayloadBytes is the size of the largest payload the suite sends to a broker
// without [Features.MaxPayloadBytes]: 900 KiB, the largest payload Enqueue accepts by
// default.
const LargePayloadBytes = 900 << 10

// Harness is one sink under test and a view of its broker, built afresh for each
// subtest.
type Harness struct {
	// Sink is the sink under test. Required.
	Sink outbox.Sink

	// Received returns every message the broker holds from this harness's sink,
	// decoded back into messages. Each aggregate's messages come in the order the
	// broker holds them; the order across aggregates does not matter. The suite calls
	// it after Publish returned: every message Publish acked must be readable by then.
	// Required.
	//
	// The suite matches received messages to published ones by ID and compares ID,
	// AggregateType, AggregateID, AggregateVersion, EventType, SchemaVersion,
	// ContentType, TraceParent, Headers (every published header must be there with its
	// value; a broker may add others) and Payload. Seq, Topic, CreatedAt and Attempt
	// are not compared: a broker need not carry them.
	Received func(ctx context.Context) ([]outbox.Message, error)

	// FailWhen, when set, makes the broker refuse each message for which refuse
	// returns true, as a broker refuses (nacks) one message it will not take, until
	// FailWhen is called again; FailWhen(nil) makes it take every message again. The
	// suite calls it only while no Publish is running. The sink must fail a refused
	// message with an error that is not [outbox.Unavailable]. Default nil: the harness
	// cannot make its broker refuse a message, and the checks that need it are skipped.
	FailWhen func(refuse func(outbox.Message) bool)

	// SetDown, when set, takes the broker out of the sink's reach (true) — typically a
	// proxy the test controls between sink and broker stops forwarding and drops the
	// connections it holds — and brings it back (false), without the sink being told
	// or rebuilt. Received must still read the broker while it is down (around the
	// proxy). The suite calls it only while no Publish is running, and ends every check
	// with the broker up. Default nil: the harness cannot take its broker down, and the
	// Outage check is skipped.
	SetDown func(down bool)

	// OutageTimeout bounds how long the Outage check waits for Publish to fail every
	// message once the broker is down, and for the sink to deliver again once it is
	// back. Set it a little above the sink's own detection timeouts. Default 30s.
	OutageTimeout time.Duration

	// MessageIDs, when set, returns the broker's own message id (or dedup key) of every
	// message the broker holds from this harness's sink, read from the broker's field
	// for it (AMQP message-id, Nats-Msg-Id, Kafka's id header), in any order. Default
	// nil: the broker has no such field, and the MessageIDs check is skipped.
	MessageIDs func(ctx context.Context) ([]string, error)
}

// Features describes what the broker cannot do. The zero value is a broker that can
// do everything the suite checks.
type Features struct {
	// NoHeaders: the broker cannot carry Message.Headers, so they are not compared.
	// Default false.
	NoHeaders bool

	// ReformatsJSON: the sink may re-encode a JSON payload (whitespace, escapes), so
	// payloads of JSON content types ("application/json", "…+json") are compared as
	// JSON values rather than bytes. Default false: every payload arrives byte for
	// byte.
	ReformatsJSON bool

	// MaxPayloadBytes is the largest payload the broker takes. When set, the suite
	// sends payloads of exactly this size, which must succeed, and one byte larger,
	// which must fail with an error marked [outbox.Permanent]. Default 0: the broker
	// takes payloads of [LargePayloadBytes], and the PayloadTooLarge check is skipped.
	MaxPayloadBytes int

	// LargestPayloadBytes, when MaxPayloadBytes is 0, is the size of the largest
	// payload the Payloads check sends: for a broker whose limit counts the message as
	// encoded (a binary payload in base64, with its attributes), so that no payload
	// size is exactly the limit and PayloadTooLarge cannot run; test the limit in the
	// sink's own tests. Default 0: [LargePayloadBytes].
	LargestPayloadBytes int
}

// Run runs the conformance suite against the sinks newSink builds: one parallel
// subtest per check, each calling newSink with its own t (so the harness can register
// its cleanup with t.Cleanup). The harnesses of concurrent subtests must not share a
// broker's topic or queue.
func Run(t *testing.T, newSink func(t *testing.T) Harness, features Features) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newSink(t)
			if h.Sink == nil || h.Received == nil {
				t.Fatal("newSink returned a Harness without Sink or Received")
			}
			c.run(newSuite(t, h, features))
		})
	}
}
