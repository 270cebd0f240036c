package natssink_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// machineURL is the machine's own NATS server, which CI starts: tests fail, not skip,
// when it is down.
const machineURL = "nats://127.0.0.1:4222"

func TestMain(m *testing.M) { pgtest.Main(m) }

// startServer starts an embedded NATS server with JetStream for t.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	return runServer(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
}

// runServer starts an embedded server with opts, shut down when t ends.
func runServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	o := *opts
	s, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// connect opens a connection as the sink should have it: no reconnect buffer, quick
// reconnects, forever.
func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("connect to nats at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

var streams atomic.Int64

// createStream creates a stream of a unique name taking subjects prefix.>, removed
// when t ends.
func createStream(t *testing.T, js jetstream.JetStream, prefix string) jetstream.Stream {
	t.Helper()
	name := fmt.Sprintf("OUTBOX_TEST_%d_%d", os.Getpid(), streams.Add(1))
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Errorf("delete stream %s: %v", name, err)
		}
	})
	return st
}

// readStream reads every message of st with a plain ordered consumer, decoded.
func readStream(ctx context.Context, st jetstream.Stream) ([]outbox.Message, []string, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return nil, nil, err
	}
	var msgs []outbox.Message
	var ids []string
	if info.State.Msgs == 0 {
		return nil, nil, nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, nil, err
	}
	for uint64(len(msgs)) < info.State.Msgs {
		batch, err := c.Fetch(int(info.State.Msgs)-len(msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var hs []sinkformat.Header
			for name, values := range m.Headers() {
				if name == jetstream.MsgIDHeader {
					ids = append(ids, values[0])
					continue
				}
				hs = append(hs, sinkformat.Header{Name: name, Value: values[0]})
			}
			msg, err := sinkformat.Decode(sinkformat.NATS, hs, m.Data())
			if err != nil {
				return nil, nil, err
			}
			msgs = append(msgs, msg)
		}
		if err := batch.Error(); err != nil {
			return nil, nil, err
		}
		if n == 0 {
			return nil, nil, fmt.Errorf("read %d of %d messages, then none came", len(msgs), info.State.Msgs)
		}
	}
	return msgs, ids, nil
}

// newProxy starts an in-process TCP proxy to upstream (host:port), stopped when t ends.
func newProxy(t *testing.T, upstream string) *toxiproxy.Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, t.Name(), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// proxySetDown is a SetDown that stops and restarts p.
func proxySetDown(t *testing.T, p *toxiproxy.Proxy) func(bool) {
	return func(down bool) {
		if down {
			p.Stop()
			return
		}
		if err := p.Start(); err != nil {
			t.Errorf("restart proxy: %v", err)
		}
	}
}

// hostPort returns the host:port of a nats:// URL.
func hostPort(t *testing.T, url string) string {
	t.Helper()
	var host, port string
	if _, err := fmt.Sscanf(url, "nats://%s", &host); err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(host)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(host, port)
}

// relayHarness runs relays over a fresh database and sink for the sinktest scenarios.
func relayHarness(t *testing.T, sink outbox.Sink, read func(context.Context) ([]outbox.Message, error), setDown func(bool)) sinktest.RelayHarness {
	t.Helper()
	pool := pgtest.Pool(t)
	return sinktest.RelayHarness{
		Enqueue: func(ctx context.Context, events []outbox.Event) error {
			return outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) })
		},
		QueryRow: func(ctx context.Context, sql string, dest ...any) error { return pool.QueryRow(ctx, sql).Scan(dest...) },
		NewRelay: func(cfg *relay.Config) (*relay.Relay, error) { return relay.New(pool, sink, cfg) },
		Read:     read,
		SetDown:  setDown,
	}
}
