package sinktest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/memsink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// relayHarness runs relays over a fresh database, publishing through sink to broker.
func relayHarness(t *testing.T, broker *memsink.Sink, sink outbox.Sink) sinktest.RelayHarness {
	read := func(context.Context) ([]outbox.Message, error) { return broker.Messages(), nil }
	return sinktest.PoolRelayHarness(pgtest.Pool(t), sink, read, broker.SetDown)
}

var errNowhere = errors.New("no route to nowhere")

// The relay scenarios pass with a sink that keeps the contract.
func TestRelayScenarios(t *testing.T) {
	t.Parallel()
	t.Run("delivers", func(t *testing.T) {
		t.Parallel()
		broker := &memsink.Sink{}
		sinktest.RelayDelivers(t, relayHarness(t, broker, broker))
	})
	t.Run("outage", func(t *testing.T) {
		t.Parallel()
		broker := &memsink.Sink{}
		sinktest.RelayOutage(t, relayHarness(t, broker, broker))
	})
	t.Run("rejects", func(t *testing.T) {
		t.Parallel()
		broker := &memsink.Sink{FailFunc: func(m outbox.Message) error {
			if m.Topic == "nowhere" {
				return outbox.Permanent(errNowhere)
			}
			return nil
		}}
		sinktest.RelayRejects(t, relayHarness(t, broker, broker), func(e *outbox.Event) { e.Topic = "nowhere" }, errNowhere.Error())
	})
}

// ackWhileDown is a sink that acks what its broker could not take while down.
type ackWhileDown struct{ broker *memsink.Sink }

func (s ackWhileDown) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := s.broker.Publish(ctx, msgs)
	for i, err := range errs {
		if outbox.IsUnavailable(err) {
			errs[i] = nil
		}
	}
	return errs
}

const brokenRelayEnv = "SINKTEST_BROKEN_RELAY"

// TestBrokenRelaySink runs RelayOutage with a sink that acks during the outage. It
// must fail, so TestRelayOutageCatchesABrokenSink runs it in a child process.
func TestBrokenRelaySink(t *testing.T) {
	if os.Getenv(brokenRelayEnv) == "" {
		t.Skip("run by TestRelayOutageCatchesABrokenSink")
	}
	broker := &memsink.Sink{}
	sinktest.RelayOutage(t, relayHarness(t, broker, ackWhileDown{broker}))
}

func TestRelayOutageCatchesABrokenSink(t *testing.T) {
	t.Parallel()
	if os.Getenv(brokenRelayEnv) != "" {
		t.Skip("in the child process")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBrokenRelaySink$", "-test.count=1")
	cmd.Env = append(os.Environ(), brokenRelayEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "published while the broker was out of reach") {
		t.Fatalf("RelayOutage passed a sink that acks while its broker is down (err %v):\n%s", err, out)
	}
}
