package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// TestRelayToKafka: sink.type kafka publishes every event to a Kafka cluster (kfake,
// franz-go's in-process broker), keyed by aggregate id.
func TestRelayToKafka(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	dsn, pool := database(t)
	insert(t, pool, "order.created", "order", 30, 3, 0)
	env := []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=kafka", "OUTBOX_SINK_KAFKA_BROKERS=" + strings.Join(c.ListenAddrs(), ","),
		"OUTBOX_SINK_KAFKA_TOPIC=orders", "OUTBOX_HTTP_LISTEN=127.0.0.1:0",
		"OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "unused"),
	}
	p := startInProcess(t, env)
	sinktest.WaitFor(t, 20*time.Second, "every event marked published", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
	p.stop(t)

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for len(got) < 30 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == sinkformat.HeaderID {
					got[string(h.Value)] = true
					break
				}
			}
			if len(r.Key) == 0 {
				t.Errorf("a record without a key: %+v", r)
			}
		})
	}
	if len(got) != 30 {
		t.Errorf("the topic holds %d distinct events, want 30", len(got))
	}
}
