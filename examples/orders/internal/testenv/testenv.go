// Package testenv gives the example's tests what they run on besides PostgreSQL
// (internal/pgtest of the root module): an embedded NATS server with JetStream, and
// waiting for a condition.
package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS starts an embedded NATS server with JetStream for t (shut down when t ends) and
// returns its URL and a JetStream client on a connection made as the relay wants it
// (no reconnect buffer).
func NATS(t testing.TB) (string, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL(), Connect(t, s.ClientURL())
}

// Connect returns a JetStream client on a new connection to url, closed when t ends.
func Connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to nats at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// WaitFor polls cond every 20 ms until it holds, failing t after timeout; what says
// what was awaited.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
