package redissink_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// machineAddr is the machine's Redis, which CI starts: tests fail, not skip, when it
// is down.
const machineAddr = "127.0.0.1:6379"

func TestMain(m *testing.M) { pgtest.Main(m) }

// connect opens a client to addr as the sink should have it, closed when t ends.
func connect(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixes atomic.Int64

// newPrefix returns a key prefix of t's own on the machine's Redis; every key under
// it is deleted when t ends. It fails t when Redis is down.
func newPrefix(t *testing.T, admin *redis.Client) string {
	t.Helper()
	if err := admin.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("the machine's Redis at %s: %v", machineAddr, err)
	}
	prefix := fmt.Sprintf("outbox-test:%d:%d:", os.Getpid(), prefixes.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, pattern := range []string{prefix + "*", "{" + prefix + "*"} {
			keys, err := keysMatching(ctx, admin, pattern)
			if err == nil && len(keys) > 0 {
				err = admin.Del(ctx, keys...).Err()
			}
			if err != nil {
				t.Errorf("clean up %s: %v", pattern, err)
			}
		}
	})
	return prefix
}

// keysMatching lists the keys matching pattern, sorted.
func keysMatching(ctx context.Context, c *redis.Client, pattern string) ([]string, error) {
	var keys []string
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	sort.Strings(keys)
	return keys, iter.Err()
}

// read reads every stream under prefix with XRANGE, each in stream order, decoded,
// and returns the messages and their id fields.
func read(ctx context.Context, c *redis.Client, prefix string) ([]outbox.Message, []string, error) {
	keys, err := keysMatching(ctx, c, prefix+"*")
	if err != nil {
		return nil, nil, err
	}
	var msgs []outbox.Message
	var ids []string
	for _, key := range keys {
		if kind, err := c.Type(ctx, key).Result(); err != nil || kind != "stream" {
			continue
		}
		entries, err := c.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			m, err := decode(e.Values)
			if err != nil {
				return nil, nil, fmt.Errorf("stream %s entry %s: %w", key, e.ID, err)
			}
			msgs, ids = append(msgs, m), append(ids, fmt.Sprint(e.Values["id"]))
		}
	}
	return msgs, ids, nil
}

// decode reads an entry's fields back into a message.
func decode(values map[string]any) (outbox.Message, error) {
	var hs []sinkformat.Header
	var payload []byte
	for name, v := range values {
		s, ok := v.(string)
		if !ok {
			return outbox.Message{}, fmt.Errorf("field %s is a %T", name, v)
		}
		if name == "payload" {
			payload = []byte(s)
			continue
		}
		hs = append(hs, sinkformat.Header{Name: name, Value: s})
	}
	if payload == nil {
		if _, ok := values["payload"]; !ok {
			return outbox.Message{}, fmt.Errorf("no payload field among %d fields", len(values))
		}
	}
	m, err := sinkformat.Decode(sinkformat.Redis, hs, payload)
	if err == nil && !strings.EqualFold(fmt.Sprint(values["id"]), m.ID.String()) {
		err = fmt.Errorf("id field %v, event id %s", values["id"], m.ID)
	}
	return m, err
}

// reader is read for the relay scenarios.
func reader(c *redis.Client, prefix string) func(context.Context) ([]outbox.Message, error) {
	return func(ctx context.Context) ([]outbox.Message, error) {
		msgs, _, err := read(ctx, c, prefix)
		return msgs, err
	}
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

func message(id string) outbox.Message {
	return outbox.Message{
		ID: outbox.NewID(), AggregateType: "order", AggregateID: id, AggregateVersion: 1, EventType: "order.paid", SchemaVersion: 1,
		ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"amount": 1200}`), Attempt: 1,
	}
}
