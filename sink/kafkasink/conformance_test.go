package kafkasink_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

var prefixes atomic.Int64

// harness builds a sink writing topics of its own prefix on the cluster at seeds,
// through a proxy the suite can take down. FailWhen routes the refused messages to a
// topic whose max.message.bytes no record fits: the broker answers
// MESSAGE_TOO_LARGE.
func harness(t *testing.T, seeds []string) sinktest.Harness {
	prefix := fmt.Sprintf("t%d", prefixes.Add(1))
	refusedTopic := "refused-" + prefix
	one := "1"
	createTopic(t, newAdmin(t, seeds), refusedTopic, 1, map[string]*string{"max.message.bytes": &one})
	p := newProxy(t, seeds[0])
	sink, err := kafkasink.New(&kafkasink.Config{
		Options: []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation(), viaProxy(p.Listen)},
		Topic:   prefix + ".{{.AggregateType}}", DeliveryTimeout: 2 * time.Second, AckTimeout: 5 * time.Second, PingTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	var refusals sinktest.Refusals
	return sinktest.Harness{
		Sink: sinktest.Reroute(sink, func(m outbox.Message) string {
			switch {
			case refusals.Refused(m):
				return refusedTopic
			case m.Topic != "":
				return prefix + "." + m.Topic
			}
			return ""
		}),
		Received: func(ctx context.Context) ([]outbox.Message, error) {
			msgs, _, err := readTopics(ctx, seeds, prefix+".")
			return msgs, err
		},
		MessageIDs: func(ctx context.Context) ([]string, error) {
			_, ids, err := readTopics(ctx, seeds, prefix+".")
			return ids, err
		},
		FailWhen:      refusals.Set,
		SetDown:       proxySetDown(t, p),
		OutageTimeout: 15 * time.Second,
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	seeds := newCluster(t).ListenAddrs()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness { return harness(t, seeds) }, sinktest.Features{})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	seeds := kgo.SeedBrokers("127.0.0.1:1")
	for _, c := range []struct {
		cfg  *kafkasink.Config
		want string
	}{
		{nil, "Options must name the seed brokers"},
		{&kafkasink.Config{Options: []kgo.Opt{seeds}, AckTimeout: -time.Second}, "AckTimeout"},
		{&kafkasink.Config{Options: []kgo.Opt{seeds}, Topic: "{{.Topik}}"}, "Topic"},
		{&kafkasink.Config{Options: []kgo.Opt{seeds}, Format: "xml"}, "Format"},
	} {
		if _, err := kafkasink.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", c.cfg, err, c.want)
		}
	}
}
