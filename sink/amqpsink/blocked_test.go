package amqpsink_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// rabbitBin is where Debian's rabbitmq-server package keeps the node's scripts.
const rabbitBin = "/usr/lib/rabbitmq/bin"

// privateBroker is a RabbitMQ node of the test's own (the machine's broker must not
// be reconfigured), in a temporary directory, on free ports.
type privateBroker struct {
	addr string
	ctl  func(args ...string) ([]byte, error)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrivateBroker starts a node with the given rabbitmq.conf lines, stopped when t
// ends.
func startPrivateBroker(t *testing.T, conf ...string) privateBroker {
	t.Helper()
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		t.Fatalf("RabbitMQ's server is not installed (%v): apt-get install rabbitmq-server", err)
	}
	dir := t.TempDir()
	port, dist := freePort(t), freePort(t)
	node := fmt.Sprintf("outbox-test-%d-%d@localhost", os.Getpid(), port)
	lines := append([]string{"listeners.tcp.default = 127.0.0.1:" + strconv.Itoa(port), "loopback_users = none"}, conf...)
	cfg := ""
	for _, l := range lines {
		cfg += l + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plugins"), []byte("[].\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "HOME="+dir, "RABBITMQ_NODENAME="+node, "RABBITMQ_NODE_PORT="+strconv.Itoa(port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(dist), "RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"), "RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "plugins"), "RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"))
	ctl := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(rabbitBin, "rabbitmqctl"), append([]string{"-n", node}, args...)...)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	ctx, cancel := context.WithCancel(context.Background())
	server := exec.CommandContext(ctx, filepath.Join(rabbitBin, "rabbitmq-server"))
	server.Env = env
	log, err := os.Create(filepath.Join(dir, "server.out"))
	if err != nil {
		t.Fatal(err)
	}
	server.Stdout, server.Stderr = log, log
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = server.Wait(); close(exited) }()
	t.Cleanup(func() {
		if out, err := ctl("stop"); err != nil {
			t.Logf("stop the private broker: %v\n%s", err, out)
		}
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cancel()
			<-exited
		}
		cancel()
		_ = log.Close()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	sinktest.WaitFor(t, 60*time.Second, "the private broker to listen on "+addr, func() bool {
		select {
		case <-exited:
			out, _ := os.ReadFile(filepath.Join(dir, "server.out"))
			t.Fatalf("the private broker exited:\n%s", out)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return privateBroker{addr: addr, ctl: ctl}
}

// With the broker's memory alarm raised, the broker blocks the publishing connection
// (connection.blocked): the sink pauses instead of spinning, reports the broker as
// unavailable once the pause outlasts ConfirmTimeout, and marks nothing published.
// When the alarm clears (connection.unblocked), the same sink delivers.
func TestBlockedConnectionPausesThenResumes(t *testing.T) {
	t.Parallel()
	b := startPrivateBroker(t, "vm_memory_high_watermark.absolute = 1MB") // below what any node uses: the alarm is up at once
	tp := newTopologyAt(t, b.addr, "order.#")
	const confirmTimeout = time.Second
	sink := newSink(t, brokerURL(b.addr), tp.exchange, &amqpsink.Config{ConfirmTimeout: confirmTimeout, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	msg := func(id string) outbox.Message {
		return outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: id, EventType: "order.paid", SchemaVersion: 1, Attempt: 1}
	}
	// The broker blocks a connection when it publishes during the alarm: the message
	// that makes it block may still go through.
	first, second, third := msg("o-1"), msg("o-2"), msg("o-3")
	if err := sink.Publish(t.Context(), []outbox.Message{first})[0]; err != nil && !outbox.IsUnavailable(err) {
		t.Fatalf("the first publish during the alarm: %v, want success or unavailable", err)
	}
	for _, m := range []outbox.Message{second, third} {
		start := time.Now()
		err := sink.Publish(t.Context(), []outbox.Message{m})[0]
		if !outbox.IsUnavailable(err) {
			t.Fatalf("publish while the broker blocks the connection: %v, want unavailable", err)
		}
		if took := time.Since(start); took < confirmTimeout*9/10 {
			t.Fatalf("publish while blocked returned after %s: it did not pause for the ConfirmTimeout (%s)", took, confirmTimeout)
		}
	}
	if n := queued(t, tp); n > 1 {
		t.Fatalf("the queue holds %d messages while the broker blocks its publisher", n)
	}
	if out, err := b.ctl("set_vm_memory_high_watermark", "0.4"); err != nil {
		t.Fatalf("clear the alarm: %v\n%s", err, out)
	}
	first.Attempt, second.Attempt, third.Attempt = 2, 2, 2
	sinktest.WaitFor(t, 30*time.Second, "the sink to deliver once the broker unblocks", func() bool {
		errs := sink.Publish(t.Context(), []outbox.Message{first, second, third})
		return errs[0] == nil && errs[1] == nil && errs[2] == nil
	})
	got, _, err := tp.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, []outbox.Message{first, second, third}, got, false)
	// The paused messages were never sent: only their republish arrived.
	copies := map[string]int{}
	for _, m := range got {
		copies[m.ID.String()]++
	}
	for _, m := range []outbox.Message{second, third} {
		if n := copies[m.ID.String()]; n != 1 {
			t.Errorf("event %s, published while the connection was blocked, arrived %d times: it was sent during the block", m.ID, n)
		}
	}
}
