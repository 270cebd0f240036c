package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/kafkasink"
	"github.com/outboxkit/outbox/sink/memsink"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// broker is one broker under measurement: its sink, the plain loop's publish, and what
// to release afterwards.
type broker struct {
	sink  outbox.Sink
	plain func(context.Context, []row) error
	// empty removes what the last drain left at the broker (nil: nothing to remove).
	empty   func(context.Context) error
	closers []func()
}

func (b *broker) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// memory names the pseudo-broker of the in-memory sink: its plain loop publishes
// nowhere.
const memory = "memory"

// redisDedup names the Redis sink with Dedup (its Lua script) against the plain XADD
// loop.
const redisDedup = "redis-dedup"

func newBroker(ctx context.Context, name string, o options) (*broker, error) {
	switch name {
	case memory:
		return &broker{sink: &memsink.Sink{}, plain: func(context.Context, []row) error { return nil }}, nil
	case "kafka":
		return newKafka()
	case "nats":
		return newNATS(ctx, o.natsURL)
	case "amqp":
		return newAMQP(o.amqpURL)
	case "http":
		return newHTTP(ctx)
	case "redis":
		return newRedis(ctx, o.redisAddr, false)
	case redisDedup:
		return newRedis(ctx, o.redisAddr, true)
	case "sqs":
		return newSQS(ctx)
	}
	return nil, fmt.Errorf("unknown broker %q (want kafka, nats, amqp, http, redis, redis-dedup or sqs)", name)
}

// encoder returns the default-format headers of a message for binding: the plain
// loops send the same messages as the sinks.
func encoder(binding sinkformat.Binding) func(outbox.Message) []sinkformat.Header {
	e, err := sinkformat.NewEncoder(binding, sinkformat.Outbox, "")
	if err != nil {
		panic(err) // the default format always builds
	}
	return func(m outbox.Message) []sinkformat.Header {
		hs, _ := e.Headers(m) // the benchmark's events have valid headers
		return hs
	}
}

func newKafka() (*broker, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	b := &broker{closers: []func(){c.Close}}
	seeds := kgo.SeedBrokers(c.ListenAddrs()...)
	sink, err := kafkasink.New(&kafkasink.Config{Options: []kgo.Opt{seeds, kgo.AllowAutoTopicCreation()}})
	if err != nil {
		b.close()
		return nil, err
	}
	b.closers = append(b.closers, sink.Close)
	b.sink = sink
	client, err := kgo.NewClient(seeds, kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("outbox.event.account"))
	if err != nil {
		b.close()
		return nil, err
	}
	b.closers = append(b.closers, client.Close)
	enc := encoder(sinkformat.Kafka)
	b.plain = func(ctx context.Context, rows []row) error {
		recs := make([]*kgo.Record, len(rows))
		for i, r := range rows {
			recs[i] = &kgo.Record{Key: []byte(r.m.AggregateID), Value: r.m.Payload}
			for _, h := range enc(r.m) {
				recs[i].Headers = append(recs[i].Headers, kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)})
			}
		}
		return client.ProduceSync(ctx, recs...).FirstErr()
	}
	return b, nil
}

func newNATS(ctx context.Context, url string) (*broker, error) {
	nc, err := nats.Connect(url, nats.ReconnectBufSize(-1))
	if err != nil {
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	b := &broker{closers: []func(){nc.Close}}
	js, err := jetstream.New(nc)
	if err != nil {
		b.close()
		return nil, err
	}
	name := fmt.Sprintf("SINKBENCH_%d", os.Getpid())
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"sinkbench.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		b.close()
		return nil, fmt.Errorf("create stream %s: %w", name, err)
	}
	b.closers = append(b.closers, func() { _ = js.DeleteStream(context.Background(), name) })
	b.empty = func(ctx context.Context) error { return st.Purge(ctx) }
	sink, err := natssink.New(ctx, js, &natssink.Config{Stream: st.CachedInfo().Config.Name, Subject: "sinkbench.{{.AggregateType}}"})
	if err != nil {
		b.close()
		return nil, err
	}
	b.sink = sink
	enc := encoder(sinkformat.NATS)
	b.plain = func(ctx context.Context, rows []row) error {
		acks := make([]jetstream.PubAckFuture, len(rows))
		for i, r := range rows {
			h := nats.Header{jetstream.MsgIDHeader: {r.m.ID.String()}}
			for _, kv := range enc(r.m) {
				h[kv.Name] = []string{kv.Value}
			}
			ack, err := js.PublishMsgAsync(&nats.Msg{Subject: "sinkbench.account", Data: r.m.Payload, Header: h})
			if err != nil {
				return err
			}
			acks[i] = ack
		}
		for _, ack := range acks {
			select {
			case <-ack.Ok():
			case err := <-ack.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	return b, nil
}

func newAMQP(url string) (*broker, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("connect to rabbitmq: %w", err)
	}
	b := &broker{closers: []func(){func() { _ = conn.Close() }}}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		b.close()
		return nil, err
	}
	name := fmt.Sprintf("sinkbench-%d", os.Getpid())
	err = errors.Join(
		ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil),
		func() error { _, err := ch.QueueDeclare(name, true, false, false, false, nil); return err }(),
		ch.QueueBind(name, "#", name, false, nil),
	)
	b.empty = func(context.Context) error { _, err := ch.QueuePurge(name, false); return err }
	b.closers = append(b.closers, func() {
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.ExchangeDelete(name, false, false)
	})
	if err != nil {
		b.close()
		return nil, fmt.Errorf("declare %s: %w", name, err)
	}
	sink, err := amqpsink.New(&amqpsink.Config{URL: url, Exchange: name})
	if err != nil {
		b.close()
		return nil, err
	}
	b.closers = append(b.closers, func() { _ = sink.Close() })
	b.sink = sink
	enc := encoder(sinkformat.AMQP)
	b.plain = func(ctx context.Context, rows []row) error {
		dcs := make([]*amqp.DeferredConfirmation, len(rows))
		for i, r := range rows {
			table := amqp.Table{}
			for _, h := range enc(r.m) {
				table[h.Name] = h.Value
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, name, r.m.AggregateType+"."+r.m.EventType, true, false, amqp.Publishing{
				Headers: table, DeliveryMode: amqp.Persistent, MessageId: r.m.ID.String(), ContentType: r.m.ContentType,
				Type: r.m.EventType, Timestamp: r.m.CreatedAt, Body: r.m.Payload,
			})
			if err != nil {
				return err
			}
			dcs[i] = dc
		}
		for _, dc := range dcs {
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				return errors.Join(err, errors.New("nacked"))
			}
		}
		return nil
	}
	return b, nil
}
