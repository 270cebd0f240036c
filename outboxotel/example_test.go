package outboxotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// The producer: the traceparent of the span in ctx goes on the event, in the business
// transaction.
func ExampleInject() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New, then outboxmigrate's Migrate
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(ctx) }()

	ctx, span := tp.Tracer("orders").Start(ctx, "pay order")
	defer span.End()
	ev := outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "order.paid", Payload: []byte(`{"amount": 1200}`)}
	outboxotel.Inject(ctx, &ev) // or ev.TraceParent = outboxotel.TraceParent(ctx)
	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), ev)
	})
	fmt.Println(err, ev.TraceParent == outboxotel.TraceParent(ctx))
	// Output: <nil> true
}

// The relay: wrap its sink; each message is published in a span that is a child of its
// producer's, and goes on carrying that span's traceparent.
func ExampleNewSink() {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	pool := pgtest.ExamplePool()
	rec := tracetest.NewSpanRecorder() // in your code: an exporter (see cmd/outbox)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(ctx) }()

	pctx, span := tp.Tracer("orders").Start(ctx, "pay order")
	ev := outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "order.paid", TraceParent: outboxotel.TraceParent(pctx)}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), ev) }); err != nil {
		panic(err)
	}
	span.End()

	mem := &memsink.Sink{} // your broker's sink: kafkasink, natssink, …
	sink := outboxotel.NewSink(mem, &outboxotel.Config{TracerProvider: tp, System: "kafka"})
	r, err := relay.New(pool, sink, nil)
	if err != nil {
		panic(err)
	}
	go func() {
		_ = mem.WaitFor(ctx, 1)
		stop()
	}()
	if err := r.Run(ctx); err != nil {
		panic(err)
	}
	publish := rec.Ended()[1]
	fmt.Println(publish.Name(), publish.SpanKind(), publish.Parent().SpanID() == span.SpanContext().SpanID())
	fmt.Println(mem.Messages()[0].TraceParent == fmt.Sprintf("00-%s-%s-01", publish.SpanContext().TraceID(), publish.SpanContext().SpanID()))
	// Output:
	// publish order.paid producer true
	// true
}

// The consumer: wrap the inbox handler; it runs in a Consumer span, a child of the
// message's traceparent, and its own spans are children of that one.
func ExampleHandler() {
	ctx := context.Background()
	pool := pgtest.ExamplePool()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(ctx) }()

	// A message as a runner decodes it from the broker (its traceparent header set).
	_, publish := tp.Tracer("relay").Start(ctx, "publish order.paid")
	msg := outbox.Message{
		ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.paid",
		SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, Payload: []byte(`{}`),
		TraceParent: outboxotel.TraceParent(trace.ContextWithSpan(ctx, publish)), CreatedAt: time.Now(), Attempt: 1,
	}
	publish.End()

	handler := outboxotel.Handler(func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		_, err := tx.Exec(ctx, `SELECT 1`) // your business work, in the inbox's transaction
		return err
	}, &outboxotel.HandlerConfig{TracerProvider: tp, Consumer: "billing"})
	res, err := inbox.Process(ctx, pool, "billing", msg, handler)
	if err != nil {
		panic(err)
	}
	process := rec.Ended()[1]
	fmt.Println(res.Outcome, process.Name(), process.SpanKind(), process.Parent().SpanID() == publish.SpanContext().SpanID())
	// Output: applied process order.paid consumer true
}

// ContextFromMessage gives a handler of one's own (not an inbox handler) the message's
// trace as the parent of its spans.
func ExampleContextFromMessage() {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	msg := outbox.Message{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ctx := outboxotel.ContextFromMessage(context.Background(), msg)
	_, span := tp.Tracer("worker").Start(ctx, "resize image")
	defer span.End()
	fmt.Println(span.SpanContext().TraceID())
	// Output: 4bf92f3577b34da6a3ce929d0e0e4736
}
