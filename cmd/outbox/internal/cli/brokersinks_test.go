package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/sink/sinktest"
)

// TestRelayToRedis: sink.type redis adds every event to a stream of the machine's
// Redis (127.0.0.1:6379, as the redissink tests use it).
func TestRelayToRedis(t *testing.T) {
	t.Parallel()
	stream := fmt.Sprintf("outbox-cli-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { client.Del(t.Context(), stream); _ = client.Close() })
	if err := client.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("the machine's Redis (see .ci/run): %v", err)
	}
	dsn, pool := database(t)
	insert(t, pool, "order.created", "order", 30, 3, 0)
	env := []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=redis", "OUTBOX_SINK_REDIS_URL=redis://127.0.0.1:6379/0",
		"OUTBOX_SINK_REDIS_STREAM=" + stream, "OUTBOX_HTTP_LISTEN=127.0.0.1:0",
		"OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "unused"),
	}
	p := startInProcess(t, env)
	sinktest.WaitFor(t, 30*time.Second, "every event marked published", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
	p.stop(t)
	if n, err := client.XLen(t.Context(), stream).Result(); err != nil || n != 30 {
		t.Errorf("the stream holds %d entries (%v), want 30", n, err)
	}
}

// TestRelayToRabbitMQ: sink.type amqp publishes every event, with confirms, to a queue
// of the machine's RabbitMQ (127.0.0.1:5672, guest).
func TestRelayToRabbitMQ(t *testing.T) {
	t.Parallel()
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("the machine's RabbitMQ (see .ci/run): %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("outbox-cli-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	dsn, pool := database(t)
	insert(t, pool, "order.created", "order", 30, 3, 0)
	env := []string{
		"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=amqp", "OUTBOX_SINK_AMQP_URL=" + url,
		"OUTBOX_SINK_AMQP_ROUTING_KEY=" + queue, "OUTBOX_HTTP_LISTEN=127.0.0.1:0",
		"OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "unused"),
	}
	p := startInProcess(t, env)
	sinktest.WaitFor(t, 30*time.Second, "every event marked published", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
	p.stop(t)
	q, err := ch.QueueDeclarePassive(queue, false, true, false, false, nil)
	if err != nil || q.Messages != 30 {
		t.Errorf("the queue holds %d messages (%v), want 30", q.Messages, err)
	}
}
