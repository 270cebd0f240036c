package outboxotel

import (
	"context"
	"encoding/hex"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
)

// traceparentLen is the length of a version-00 W3C traceparent:
// 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>.
const traceparentLen = 55

// TraceParent returns the W3C traceparent of the span in ctx, for
// [outbox.Event.TraceParent]; "" when ctx carries no valid span context.
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return formatSpanContext(sc)
}

// formatSpanContext returns the version-00 traceparent of a valid sc (the trace state
// is not carried: the outbox stores the traceparent alone).
func formatSpanContext(sc trace.SpanContext) string {
	var buf [traceparentLen]byte
	return string(appendSpanContext(buf[:0], sc))
}

// appendSpanContext appends the version-00 traceparent of a valid sc to dst.
func appendSpanContext(dst []byte, sc trace.SpanContext) []byte {
	var buf [traceparentLen]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	buf[0], buf[1], buf[2] = '0', '0', '-'
	hex.Encode(buf[3:35], tid[:])
	buf[35] = '-'
	hex.Encode(buf[36:52], sid[:])
	buf[52] = '-'
	hex.Encode(buf[53:55], []byte{byte(sc.TraceFlags())})
	return append(dst, buf[:]...)
}

// uuidLen is the length of a UUID's canonical text form.
const uuidLen = 36

// appendUUID appends id in its canonical form (as [uuid.UUID.String]) to dst.
func appendUUID(dst []byte, id uuid.UUID) []byte {
	var buf [uuidLen]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], id[10:16])
	return append(dst, buf[:]...)
}

// Inject sets ev.TraceParent to the traceparent of the span in ctx, when there is one,
// and leaves it as it is otherwise. Call it before [outbox.Enqueue].
func Inject(ctx context.Context, ev *outbox.Event) {
	if tp := TraceParent(ctx); tp != "" {
		ev.TraceParent = tp
	}
}

// spanContextOf parses a W3C traceparent as the Trace Context specification reads it
// (a version other than 00 may add fields after a dash; ids are lowercase hex, not all
// zero): a remote SpanContext, or the zero (invalid) one when tp is empty or malformed.
// It does not allocate.
func spanContextOf(tp string) trace.SpanContext {
	if len(tp) < traceparentLen || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}
	}
	var version [1]byte
	if !decodeLower(version[:], tp[0:2]) || version[0] == 0xff ||
		(version[0] == 0 && len(tp) != traceparentLen) || (len(tp) > traceparentLen && tp[traceparentLen] != '-') {
		return trace.SpanContext{}
	}
	var cfg trace.SpanContextConfig
	var flags [1]byte
	if !decodeLower(cfg.TraceID[:], tp[3:35]) || !decodeLower(cfg.SpanID[:], tp[36:52]) || !decodeLower(flags[:], tp[53:55]) {
		return trace.SpanContext{}
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0])
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// decodeLower decodes lowercase hex s into dst (len(s) == 2*len(dst)).
func decodeLower(dst []byte, s string) bool {
	for i := range dst {
		hi, lo := hexValue[s[2*i]], hexValue[s[2*i+1]]
		if (hi|lo)&invalidHex != 0 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// invalidHex marks, in hexValue, a byte that is not a lowercase hex digit (a digit's
// value has no bit of it).
const invalidHex = 0xf0

// hexValue is the value of each lowercase hex digit, invalidHex for any other byte.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = invalidHex
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
	}
	return t
}()

// ContextFromMessage returns ctx carrying the span context of msg.TraceParent as a
// remote parent, so spans started from it are children of the span that published the
// message (or, for a message not published through [NewSink], of the producer's). ctx
// is returned as it is when msg has no valid traceparent.
func ContextFromMessage(ctx context.Context, msg outbox.Message) context.Context {
	sc := spanContextOf(msg.TraceParent)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
