package kafkasink_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newCluster starts an in-process kfake cluster of one broker, closed when t ends.
func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newAdmin returns an admin client of the cluster at seeds.
func newAdmin(t *testing.T, seeds []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// createTopic creates topic with the given partitions and configs.
func createTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	resp, err := adm.CreateTopic(t.Context(), partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// readTopics reads, with a plain franz-go consumer, every record of the topics whose
// names start with prefix, up to their end offsets now: each record decoded, and the
// value of its id header.
func readTopics(ctx context.Context, seeds []string, prefix string) ([]outbox.Message, []string, error) {
	recs, err := consume(ctx, seeds, prefix)
	if err != nil {
		return nil, nil, err
	}
	var msgs []outbox.Message
	var ids []string
	for _, r := range recs {
		m, id, err := decode(r)
		if err != nil {
			return nil, nil, err
		}
		msgs, ids = append(msgs, m), append(ids, id)
	}
	return msgs, ids, nil
}

// decode reads a record back into a message; id is its id header.
func decode(r *kgo.Record) (outbox.Message, string, error) {
	hs := make([]sinkformat.Header, len(r.Headers))
	var id string
	for i, h := range r.Headers {
		hs[i] = sinkformat.Header{Name: h.Key, Value: string(h.Value)}
		if h.Key == sinkformat.HeaderID {
			id = string(h.Value)
		}
	}
	m, err := sinkformat.Decode(sinkformat.Kafka, hs, r.Value)
	if err != nil {
		return m, "", fmt.Errorf("record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if string(r.Key) != m.AggregateID {
		return m, "", fmt.Errorf("record %s/%d@%d: key %q is not the aggregate id %q", r.Topic, r.Partition, r.Offset, r.Key, m.AggregateID)
	}
	return m, id, nil
}

// consume returns the records of the topics starting with prefix, up to their end
// offsets now, in partition order.
func consume(ctx context.Context, seeds []string, prefix string) ([]*kgo.Record, error) {
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, err
	}
	want := map[string]map[int32]int64{}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
			total += o.Offset
		}
	})
	if total == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(names...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for int64(len(recs)) < total {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %d of %d records: %w", len(recs), total, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("fetch: %w", errs[0].Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset < want[r.Topic][r.Partition] {
				recs = append(recs, r)
			}
		})
	}
	return recs, nil
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

// viaProxy is the client option that sends every broker connection through the
// proxy at addr, whatever address the cluster advertises.
func viaProxy(addr string) kgo.Opt {
	var d net.Dialer
	return kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	})
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
