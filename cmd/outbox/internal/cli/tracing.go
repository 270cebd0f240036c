package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxotel"
)

// The OpenTelemetry variables the command reads itself (docs/configuration.md,
// "Traces"); the SDK and the OTLP exporter read the rest of OTEL_* from the process
// environment.
const (
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envServiceName    = "OTEL_SERVICE_NAME"
	envResourceAttrs  = "OTEL_RESOURCE_ATTRIBUTES"
)

// tracerShutdownTimeout bounds the flush of the spans still buffered at exit.
const tracerShutdownTimeout = 5 * time.Second

// tracerProvider returns the relay's TracerProvider as the OTEL_* variables ask: nil (no
// tracing, no cost) when OTEL_TRACES_EXPORTER is unset or "none" or OTEL_SDK_DISABLED is
// "true"; otherwise an SDK provider with a batch span processor exporting to "otlp"
// (through autoexport: OTEL_EXPORTER_OTLP_* choose the protocol and endpoint) or to
// "console" (the command's standard output).
func (a *app) tracerProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(a.io.Env, envSDKDisabled)), "true") {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch name := strings.TrimSpace(getenv(a.io.Env, envTracesExporter)); name {
	case "", "none":
		return nil, nil
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(a.out))
	case "otlp":
		exp, err = autoexport.NewSpanExporter(ctx) // OTEL_TRACES_EXPORTER is otlp (or unset, in a test: otlp too)
	default:
		return nil, usagef("%s: unknown exporter %q (otlp, console or none)", envTracesExporter, name)
	}
	if err != nil {
		return nil, usagef("%s: %w", envTracesExporter, err)
	}
	res, err := a.traceResource(ctx)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		a.log.Warn("traces", slog.Any("error", err))
	}))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// traceResource is the resource of the relay's spans: service.name "outbox" unless
// OTEL_SERVICE_NAME names another, and the attributes of OTEL_RESOURCE_ATTRIBUTES.
func (a *app) traceResource(ctx context.Context) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName("outbox")}
	if s := strings.TrimSpace(getenv(a.io.Env, envResourceAttrs)); s != "" {
		for pair := range strings.SplitSeq(s, ",") {
			k, v, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, usagef("%s: %q is not key=value", envResourceAttrs, pair)
			}
			uv, err := url.PathUnescape(strings.TrimSpace(v))
			if err != nil {
				return nil, usagef("%s: the value of %s: %w", envResourceAttrs, k, err)
			}
			attrs = append(attrs, attribute.String(k, uv))
		}
	}
	if s := strings.TrimSpace(getenv(a.io.Env, envServiceName)); s != "" {
		attrs = append(attrs, semconv.ServiceName(s))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
	if err != nil {
		return nil, fmt.Errorf("traces: resource: %w", err)
	}
	return res, nil
}

// traceSink wraps sink in publish spans when tp is set.
func (a *app) traceSink(sink outbox.Sink, tp *sdktrace.TracerProvider) outbox.Sink {
	if tp == nil {
		return sink
	}
	system := a.cfg.Sink.Type
	switch system {
	case "amqp":
		system = "rabbitmq"
	case "sqs":
		system = "aws_sqs" // the OpenTelemetry messaging.system value
	}
	spans := outboxotel.SpanPerMessage
	if a.cfg.TracingSpans == "call" {
		spans = outboxotel.SpanPerCall
	}
	return outboxotel.NewSink(sink, &outboxotel.Config{TracerProvider: tp, System: system, Spans: spans})
}

// shutdownTracing flushes the spans still buffered and stops the exporter.
func (a *app) shutdownTracing(ctx context.Context, tp *sdktrace.TracerProvider) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracerShutdownTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		a.log.Warn("traces: flush at exit", slog.Any("error", err))
	}
}
