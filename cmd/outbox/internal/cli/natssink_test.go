package cli_test

import (
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/sink/sinktest"
)

// TestRelayToNATS: sink.type nats publishes every event to a real (embedded) JetStream
// server, one message per event with its id as Nats-Msg-Id; the NATS password, like the
// database's, appears in no output.
func TestRelayToNATS(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, Username: "relay", Password: canary,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	t.Cleanup(srv.Shutdown)
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("relay", canary)
	nc, err := nats.Connect(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}

	dsn, pool := database(t)
	insert(t, pool, "order.created", "order", 40, 4, 0)
	env := []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=nats", "OUTBOX_SINK_NATS_URL=" + u.String(),
		"OUTBOX_SINK_NATS_STREAM=OUTBOX", "OUTBOX_HTTP_LISTEN=127.0.0.1:0",
		"OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "unused"),
	}
	p := startInProcess(t, env)
	sinktest.WaitFor(t, 30*time.Second, "40 messages in the stream", func() bool {
		info, err := stream.Info(t.Context())
		return err == nil && info.State.Msgs == 40
	})
	sinktest.WaitFor(t, 30*time.Second, "every event marked published", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
	if info, err := stream.Info(t.Context()); err != nil {
		t.Fatal(err)
	} else if info.State.Msgs != 40 {
		t.Errorf("the stream holds %d messages, want 40: one per event", info.State.Msgs)
	}
	msg, err := stream.GetMsg(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if id := msg.Header.Get("Nats-Msg-Id"); id == "" || msg.Subject != "outbox.event.order" {
		t.Errorf("first message: subject %q, Nats-Msg-Id %q", msg.Subject, id)
	}
	p.stop(t)
	noSecret(t, fmt.Sprint(p.stdout.String(), p.stderr.String()), canary)
}
