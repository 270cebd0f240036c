package sqssink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinktest"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// features: a binary payload travels in base64, so the largest payload the suite sends
// is one whose base64 fits in 256 KiB with its attributes.
var features = sinktest.Features{LargestPayloadBytes: 150_000}

// newSink returns a sink sending to queue (a Topic is sent there too, where the test
// cannot create queues by topic).
func newSink(t *testing.T, api sqssink.API, queue string, cfg *sqssink.Config) outbox.Sink {
	t.Helper()
	c := sqssink.Config{RequestTimeout: 5 * time.Second}
	if cfg != nil {
		c = *cfg
	}
	c.Queue = queue
	s, err := sqssink.New(api, &c)
	if err != nil {
		t.Fatal(err)
	}
	return sinktest.Reroute(s, func(m outbox.Message) string {
		if m.Topic != "" {
			return queue
		}
		return ""
	})
}

// goawsHarness builds a sink on a queue of its own on goaws, through a proxy the suite
// can take down, sending with SendMessage (goaws's SendMessageBatch answer is not in
// the shape the SDK reads: batches run on the fake). goaws cannot refuse a message:
// the checks that need FailWhen run on the fake too.
func goawsHarness(fifo bool) func(t *testing.T) sinktest.Harness {
	return func(t *testing.T) sinktest.Harness {
		endpoint := goaws(t)
		admin := client(endpoint)
		queue := createGoawsQueue(t, admin, fifo)
		p := newProxy(t, hostOf(endpoint))
		read := func(context.Context) ([]outbox.Message, []string, error) {
			ss, err := goawsStored(queue)
			if err != nil {
				return nil, nil, err
			}
			return decodeAll(ss)
		}
		h := sinktest.Harness{
			Sink:          newSink(t, client("http://"+p.Listen), queue, &sqssink.Config{Unbatched: true, RequestTimeout: 5 * time.Second}),
			Received:      func(ctx context.Context) ([]outbox.Message, error) { m, _, err := read(ctx); return m, err },
			SetDown:       sinktest.ProxySetDown(t, p),
			OutageTimeout: 20 * time.Second,
		}
		if fifo {
			h.MessageIDs = func(ctx context.Context) ([]string, error) { _, ids, err := read(ctx); return ids, err }
		}
		return h
	}
}

func TestConformanceGoaws(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, goawsHarness(false), features)
}

func TestConformanceGoawsFIFO(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, goawsHarness(true), features)
}

// The fake harness: a FIFO queue of its own on the fake, through a proxy; FailWhen
// makes the fake refuse those entries (InvalidMessageContents, the sender's fault).
func TestConformanceFake(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		f := newFakeSQS(t)
		queue := queueName(true)
		f.createQueue(queue)
		p := newProxy(t, hostOf(f.srv.URL))
		var refusals sinktest.Refusals
		f.setRefuse(func(e fakeEntry) bool {
			m, err := decode(fakeStored1(e))
			return err == nil && refusals.Refused(m)
		})
		read := func() ([]outbox.Message, []string, error) { return decodeAll(fakeStored(f, queue)) }
		return sinktest.Harness{
			Sink:          newSink(t, client("http://"+p.Listen), queue, nil),
			Received:      func(context.Context) ([]outbox.Message, error) { m, _, err := read(); return m, err },
			MessageIDs:    func(context.Context) ([]string, error) { _, ids, err := read(); return ids, err },
			FailWhen:      refusals.Set,
			SetDown:       sinktest.ProxySetDown(t, p),
			OutageTimeout: 20 * time.Second,
		}
	}, features)
}

// fakeStored1 is one entry as stored.
func fakeStored1(e fakeEntry) stored {
	s := stored{body: e.MessageBody, attrs: make(map[string]string), group: e.MessageGroupID, dedupID: e.MessageDeduplicationID, transportTypeOK: true}
	for name, a := range e.MessageAttributes {
		s.attrs[name] = a.StringValue
		s.transportTypeOK = s.transportTypeOK && a.DataType == "String"
	}
	return s
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := client("http://127.0.0.1:1")
	for _, tc := range []struct {
		cfg  *sqssink.Config
		want string
	}{
		{nil, "Queue is required"},
		{&sqssink.Config{Queue: "q", MaxMessageBytes: 10}, "MaxMessageBytes"},
		{&sqssink.Config{Queue: "q", RequestTimeout: -time.Second}, "RequestTimeout"},
		{&sqssink.Config{Queue: "{{.AgregateType}}"}, "Queue"},
		{&sqssink.Config{Queue: "q", Format: "xml"}, "Format"},
	} {
		if _, err := sqssink.New(c, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}
