package natssink_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

var prefixes atomic.Int64

// harness builds a sink on its own stream of the server at url, and, when proxied, a
// connection through a proxy the suite can take down. FailWhen routes the refused
// messages to a subject no stream takes: the server answers "no responders" while the
// stream is healthy.
func harness(t *testing.T, url string, proxied bool) sinktest.Harness {
	prefix := fmt.Sprintf("t%d", prefixes.Add(1))
	_, admin := connect(t, url)
	st := createStream(t, admin, prefix)
	sinkURL := url
	var setDown func(bool)
	if proxied {
		p := newProxy(t, hostPort(t, url))
		sinkURL = "nats://" + p.Listen
		setDown = proxySetDown(t, p)
	}
	_, js := connect(t, sinkURL)
	sink, err := natssink.New(t.Context(), js, &natssink.Config{
		Stream: st.CachedInfo().Config.Name, Subject: prefix + ".{{.AggregateType}}",
		AckTimeout: 2 * time.Second, HealthTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var refusals sinktest.Refusals
	return sinktest.Harness{
		Sink: sinktest.Reroute(sink, func(m outbox.Message) string {
			switch {
			case refusals.Refused(m):
				return "refused." + prefix + "." + m.ID.String()
			case m.Topic != "":
				return prefix + "." + m.Topic
			}
			return ""
		}),
		Received: func(ctx context.Context) ([]outbox.Message, error) {
			msgs, _, err := readStream(ctx, st)
			return msgs, err
		},
		MessageIDs: func(ctx context.Context) ([]string, error) {
			_, ids, err := readStream(ctx, st)
			return ids, err
		},
		FailWhen:      refusals.Set,
		SetDown:       setDown,
		OutageTimeout: 15 * time.Second,
	}
}

func TestConformanceEmbeddedServer(t *testing.T) {
	t.Parallel()
	url := startServer(t).ClientURL()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness { return harness(t, url, true) }, sinktest.Features{})
}

func TestConformanceMachineServer(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness { return harness(t, machineURL, true) }, sinktest.Features{})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, js := connect(t, startServer(t).ClientURL())
	for _, c := range []struct {
		cfg  *natssink.Config
		want string
	}{
		{nil, "Stream is required"},
		{&natssink.Config{Stream: "S", AckTimeout: -time.Second}, "AckTimeout"},
		{&natssink.Config{Stream: "S", Subject: "{{.AgregateType}}"}, "Subject"},
		{&natssink.Config{Stream: "S", Format: "xml"}, "Format"},
		{&natssink.Config{Stream: "NO_SUCH_STREAM"}, "look up stream"},
	} {
		if _, err := natssink.New(t.Context(), js, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", c.cfg, err, c.want)
		}
	}
}

// A republish of an event the stream holds (the relay retrying after a lost ack) is
// acked as a duplicate: a success, and the stream keeps one copy.
func TestDuplicateAckIsSuccess(t *testing.T) {
	t.Parallel()
	_, js := connect(t, startServer(t).ClientURL())
	st := createStream(t, js, "dup")
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name, Subject: "dup.{{.AggregateType}}"})
	if err != nil {
		t.Fatal(err)
	}
	m := outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.paid", SchemaVersion: 1, Attempt: 1}
	for attempt := 1; attempt <= 3; attempt++ {
		m.Attempt = attempt
		if errs := sink.Publish(t.Context(), []outbox.Message{m}); errs[0] != nil {
			t.Fatalf("attempt %d: %v", attempt, errs[0])
		}
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages after 3 publishes of one event, want 1 (Nats-Msg-Id dedup)", info.State.Msgs)
	}
}

// A subject no stream takes is a permanent failure of that message alone while the
// stream is healthy; the same "no responders" with the server gone is an outage.
func TestNoStreamIsPermanentOutageIsNot(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	p := newProxy(t, hostPort(t, srv.ClientURL()))
	_, js := connect(t, "nats://"+p.Listen)
	st := createStream(t, js, "ns")
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name, Subject: "ns.{{.AggregateType}}", AckTimeout: time.Second, HealthTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(topic string) outbox.Message {
		return outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: outbox.NewID().String(), EventType: "x", SchemaVersion: 1, Topic: topic}
	}
	errs := sink.Publish(t.Context(), []outbox.Message{msg("elsewhere.x"), msg("")})
	if !outbox.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), `no stream takes subject "elsewhere.x"`) {
		t.Errorf("subject without a stream: %v, want permanent, naming the subject", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("the other message failed: %v", errs[1])
	}
}

// The server restarts between a publish and its retry (as a JetStream leader change
// looks to a client): while it is gone the sink reports an outage; once it is back the
// retry with the same Nats-Msg-Id is acked as a duplicate — a success — and the stream
// holds each event once.
func TestServerRestartRetryIsDeduplicated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	srv := runServer(t, opts)
	opts.Port = srv.Addr().(*net.TCPAddr).Port
	nc, js := connect(t, srv.ClientURL())
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "RESTART", Subjects: []string{"restart.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name, Subject: "restart.{{.AggregateType}}", AckTimeout: time.Second, HealthTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	first := outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "x", SchemaVersion: 1, Attempt: 1}
	if err := sink.Publish(t.Context(), []outbox.Message{first})[0]; err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	second := first
	second.ID = outbox.NewID()
	if err := sink.Publish(t.Context(), []outbox.Message{second})[0]; !outbox.IsUnavailable(err) {
		t.Fatalf("publish with the server down: %v, want unavailable", err)
	}
	runServer(t, opts)
	sinktest.WaitFor(t, 10*time.Second, "the client to reconnect", nc.IsConnected)
	first.Attempt, second.Attempt = 2, 2
	var errs []error
	sinktest.WaitFor(t, 10*time.Second, "the stream to take publishes again", func() bool {
		errs = sink.Publish(t.Context(), []outbox.Message{first, second})
		return errs[0] == nil && errs[1] == nil
	})
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2: the first event's retry was stored again", info.State.Msgs)
	}
}
