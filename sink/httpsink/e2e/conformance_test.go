package e2e_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox/sink/sinktest"
)

// harness builds a sink posting to an endpoint of its own through a proxy the suite
// can take down. FailWhen makes the endpoint answer 422 Unprocessable Entity.
func harness(t *testing.T) sinktest.Harness {
	e := newEndpoint(t, nil)
	p := newProxy(t, e.addr())
	return sinktest.Harness{
		Sink:          newSink(t, e, p.Listen, nil),
		Received:      e.received,
		MessageIDs:    e.ids,
		FailWhen:      e.refusals.Set,
		SetDown:       sinktest.ProxySetDown(t, p),
		OutageTimeout: 15 * time.Second,
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, harness, sinktest.Features{})
}
