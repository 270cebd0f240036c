package outboxotel

import (
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/google/uuid"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// extract is what OpenTelemetry's own W3C propagator reads from tp.
func extract(tp string) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
}

// TestTraceParentMatchesThePropagator: the hand-written parser and formatter agree with
// propagation.TraceContext on valid, malformed and future-version traceparents.
func TestTraceParentMatchesThePropagator(t *testing.T) {
	for _, tp := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
		"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
		"",
	} {
		got, want := spanContextOf(tp), extract(tp)
		if got.IsValid() != want.IsValid() || (want.IsValid() && (!got.Equal(want) || !got.IsRemote())) {
			t.Errorf("%q: parsed %+v, the propagator %+v", tp, got, want)
		}
		if want.IsValid() {
			var c propagation.MapCarrier = map[string]string{}
			propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), want), c)
			if f := formatSpanContext(want); f != c["traceparent"] {
				t.Errorf("%q: formatted %q, the propagator %q", tp, f, c["traceparent"])
			}
		}
	}
}

// TestAppendUUIDMatchesString: the hand-written formatter writes what uuid.UUID.String
// does.
func TestAppendUUIDMatchesString(t *testing.T) {
	for _, id := range []uuid.UUID{uuid.Nil, uuid.Max, uuid.New(), uuid.New(), uuid.Must(uuid.NewV7())} {
		if got := string(appendUUID([]byte("x"), id)); got != "x"+id.String() {
			t.Errorf("appendUUID(%s) = %q", id, got)
		}
	}
}

// TestNameCache: names are "<operation> <suffix>" (the operation alone for none), the
// same string each time once cached, and still right past the cache's bound.
func TestNameCache(t *testing.T) {
	c := nameCache{operation: "publish"}
	if got := c.of(""); got != "publish" {
		t.Errorf("of(\"\") = %q", got)
	}
	first := c.of("orders")
	if first != "publish orders" || unsafe.StringData(c.of("orders")) != unsafe.StringData(first) {
		t.Errorf("of(orders) = %q, not the cached string the second time", first)
	}
	for i := range maxCachedNames + 10 {
		if got, want := c.of(fmt.Sprint("t", i)), fmt.Sprint("publish t", i); got != want {
			t.Fatalf("of(t%d) = %q, want %q", i, got, want)
		}
	}
	if n := len(*c.names.Load()); n != maxCachedNames {
		t.Errorf("%d names cached, want the bound %d", n, maxCachedNames)
	}
}
