package cli_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/sink/sinktest"
)

// The W3C traceparent the test events carry: a producer's span.
const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
	producerTP    = "00-" + producerTrace + "-" + producerSpan + "-01"
)

// consoleSpan is the part of a span that the console exporter writes and the test reads.
type consoleSpan struct {
	Name        string
	SpanKind    int
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Resource []struct {
		Key   string
		Value struct{ Value any }
	}
}

// relayTraced runs `outbox relay` over three events written with producerTP until they
// are published, with the OTEL_* variables otel, and returns its stdout and the
// traceparents the jsonl sink wrote.
func relayTraced(t *testing.T, otel ...string) (stdout string, sent []string) {
	t.Helper()
	dsn, pool := database(t)
	insert(t, pool, "order.created", "order", 3, 1, 0)
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET trace_parent = $1`, producerTP); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	env := append([]string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=jsonl", "OUTBOX_SINK_JSONL_PATH=" + path,
		"OUTBOX_HTTP_LISTEN=127.0.0.1:0",
	}, otel...)
	p := startInProcess(t, env)
	sinktest.WaitFor(t, 30*time.Second, "every event marked published", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
	p.stop(t)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			TraceParent string `json:"trace_parent"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, line.TraceParent)
	}
	return p.stdout.String(), sent
}

// TestRelayTracesToConsole: OTEL_TRACES_EXPORTER=console makes `outbox relay` write a
// publish span per event to its standard output — each a Producer child of the event's
// traceparent, with the resource of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES — by
// the time it exits (the provider is flushed at exit), and the sink sends each event
// with its publish span's traceparent.
func TestRelayTracesToConsole(t *testing.T) {
	t.Parallel()
	stdout, sent := relayTraced(t, "OTEL_TRACES_EXPORTER=console", "OTEL_SERVICE_NAME=billing-relay",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test,team=pay%20ments")
	dec := json.NewDecoder(strings.NewReader(stdout))
	publishes := map[string]consoleSpan{} // by traceparent
	for {
		var s consoleSpan
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stdout is not the console exporter's spans: %v\n%s", err, stdout)
		}
		if s.Name == "publish order.created" {
			publishes["00-"+s.SpanContext.TraceID+"-"+s.SpanContext.SpanID+"-01"] = s
		}
	}
	if len(publishes) != 3 {
		t.Fatalf("%d publish spans on stdout, want 3:\n%s", len(publishes), stdout)
	}
	for tp, s := range publishes {
		if s.Parent.TraceID != producerTrace || s.Parent.SpanID != producerSpan {
			t.Errorf("publish span's parent %s/%s, want the producer's %s/%s", s.Parent.TraceID, s.Parent.SpanID, producerTrace, producerSpan)
		}
		if s.SpanKind != 4 { // trace.SpanKindProducer
			t.Errorf("publish span of kind %d, want 4 (producer)", s.SpanKind)
		}
		attrs := map[string]any{}
		for _, kv := range s.Attributes {
			attrs[kv.Key] = kv.Value.Value
		}
		if attrs["messaging.system"] != "jsonl" || attrs["outbox.event.type"] != "order.created" {
			t.Errorf("publish span attributes %v", attrs)
		}
		res := map[string]any{}
		for _, kv := range s.Resource {
			res[kv.Key] = kv.Value.Value
		}
		if res["service.name"] != "billing-relay" || res["deployment.environment.name"] != "test" || res["team"] != "pay ments" {
			t.Errorf("resource %v", res)
		}
		found := false
		for _, got := range sent {
			found = found || got == tp
		}
		if !found {
			t.Errorf("no event was sent with its publish span's traceparent %s (sent %v)", tp, sent)
		}
	}
}

// TestRelayTracesAPublishCall: with tracing.spans call, `outbox relay` records send spans
// (one a Publish call) that count the call's messages, and sends each event with the
// traceparent it was written with (the consumer stays the producer's child).
func TestRelayTracesAPublishCall(t *testing.T) {
	t.Parallel()
	stdout, sent := relayTraced(t, "OTEL_TRACES_EXPORTER=console", "OUTBOX_TRACING_SPANS=call")
	dec := json.NewDecoder(strings.NewReader(stdout))
	var messages float64
	for {
		var s consoleSpan
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stdout is not the console exporter's spans: %v\n%s", err, stdout)
		}
		if strings.HasPrefix(s.Name, "publish") {
			t.Fatalf("a span per message (%s) with tracing.spans call", s.Name)
		}
		if !strings.HasPrefix(s.Name, "send") {
			continue
		}
		for _, kv := range s.Attributes {
			if n, ok := kv.Value.Value.(float64); ok && kv.Key == "messaging.batch.message_count" {
				messages += n
			}
		}
	}
	if messages != 3 {
		t.Fatalf("send spans counted %v messages, want 3:\n%s", messages, stdout)
	}
	for _, tp := range sent {
		if tp != producerTP {
			t.Errorf("an event sent with traceparent %s, want the producer's %s", tp, producerTP)
		}
	}
}

// TestRelayWithoutTracing: with no OTEL_TRACES_EXPORTER (and with "none") the relay
// writes no span and sends each event with the traceparent it was written with.
func TestRelayWithoutTracing(t *testing.T) {
	t.Parallel()
	for _, otel := range [][]string{nil, {"OTEL_TRACES_EXPORTER=none"}, {"OTEL_TRACES_EXPORTER=console", "OTEL_SDK_DISABLED=true"}} {
		stdout, sent := relayTraced(t, otel...)
		if strings.Contains(stdout, "SpanContext") {
			t.Errorf("%v: spans on stdout:\n%s", otel, stdout)
		}
		if len(sent) != 3 || sent[0] != producerTP || sent[1] != producerTP || sent[2] != producerTP {
			t.Errorf("%v: sent with traceparents %v, want the producer's", otel, sent)
		}
	}
}

// TestRelayRefusesUnknownExporter: an OTEL_TRACES_EXPORTER the command does not know is
// a usage error (exit 2) naming the variable.
func TestRelayRefusesUnknownExporter(t *testing.T) {
	t.Parallel()
	dsn, _ := database(t)
	r := run(t, []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=jsonl", "OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "x"),
		"OTEL_TRACES_EXPORTER=zipkin",
	}, "relay")
	if r.code != 2 || !strings.Contains(r.stderr, "OTEL_TRACES_EXPORTER") {
		t.Errorf("want exit 2 naming OTEL_TRACES_EXPORTER:\n%s", r)
	}
}
