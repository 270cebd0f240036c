package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/outboxkit/outbox/sink/httpsink"
	"github.com/outboxkit/outbox/sink/redissink"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// inFlight is how many requests the HTTP and SQS plain loops have in flight at once:
// httpsink's default MaxConnsPerHost and sqssink's default MaxInFlight.
const inFlight = 8

// benchSecret signs the webhook benchmark's requests.
const benchSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" //nolint:gosec // the Standard Webhooks spec's example secret

// parallel runs f for each of n items, at most inFlight at once, and returns the first
// error.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	slots := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newHTTP is a webhook endpoint on loopback (net/http, plain HTTP: TLS would cost both
// sides alike) answering 204; the plain loop POSTs the same signed requests with a
// plain http.Client.
func newHTTP(ctx context.Context) (*broker, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	b := &broker{closers: []func(){func() { _ = srv.Close() }}}
	url := "http://" + ln.Addr().String() + "/hooks/account"
	sink, err := httpsink.New(&httpsink.Config{
		URL: url, AllowedHosts: []string{"127.0.0.1"}, Secrets: []string{benchSecret}, AllowHTTP: true,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	})
	if err != nil {
		b.close()
		return nil, err
	}
	b.closers = append(b.closers, func() { _ = sink.Close() })
	b.sink = sink
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: inFlight, MaxIdleConnsPerHost: inFlight}}
	b.closers = append(b.closers, client.CloseIdleConnections)
	enc := encoder(sinkformat.HTTP)
	b.plain = func(ctx context.Context, rows []row) error {
		return parallel(len(rows), func(i int) error {
			m := rows[i].m
			now := time.Now()
			sig, err := httpsink.Sign([]string{benchSecret}, m.ID.String(), now, m.Payload)
			if err != nil {
				return err
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(m.Payload))
			if err != nil {
				return err
			}
			for _, h := range enc(m) {
				req.Header[h.Name] = []string{h.Value}
			}
			req.Header[httpsink.HeaderID] = []string{m.ID.String()}
			req.Header[httpsink.HeaderTimestamp] = []string{strconv.FormatInt(now.Unix(), 10)}
			req.Header[httpsink.HeaderSignature] = []string{sig}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("POST: %s", resp.Status)
			}
			return nil
		})
	}
	return b, nil
}

// newRedis is a stream of its own on the Redis at addr (removed afterwards); the
// plain loop pipelines one XADD per row with the same fields. With dedup the sink runs
// its Lua script; the plain loop stays plain XADD.
func newRedis(ctx context.Context, addr string, dedup bool) (*broker, error) {
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b := &broker{closers: []func(){func() { _ = client.Close() }}}
	if err := client.Ping(ctx).Err(); err != nil {
		b.close()
		return nil, fmt.Errorf("connect to redis at %s: %w", addr, err)
	}
	prefix := fmt.Sprintf("sinkbench:%d:", os.Getpid())
	b.empty = func(ctx context.Context) error {
		iter := client.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			if err := client.Del(ctx, keys[:n]...).Err(); err != nil {
				return err
			}
			keys = keys[n:]
		}
		return iter.Err()
	}
	b.closers = append(b.closers, func() { _ = b.empty(context.Background()) })
	sink, err := redissink.New(client, &redissink.Config{Stream: prefix + "{{.AggregateType}}", Dedup: dedup})
	if err != nil {
		b.close()
		return nil, err
	}
	b.sink = sink
	enc := encoder(sinkformat.Redis)
	b.plain = func(ctx context.Context, rows []row) error {
		cmds, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, r := range rows {
				values := make([]any, 0, 20)
				for _, h := range enc(r.m) {
					values = append(values, h.Name, h.Value)
				}
				values = append(values, "payload", r.m.Payload)
				p.XAdd(ctx, &redis.XAddArgs{Stream: prefix + "account", Values: values})
			}
			return nil
		})
		for _, c := range cmds {
			if c.Err() != nil {
				return c.Err()
			}
		}
		return err
	}
	return b, nil
}

var goawsOnce sync.Once

// startGoaws starts goaws in this process once and returns its endpoint.
func startGoaws(ctx context.Context) (string, error) {
	var startErr error
	goawsOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			startErr = err
			return
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		models.CurrentEnvironment = models.Environment{
			Host: "127.0.0.1", Port: port, AccountID: "100010001000",
			QueueAttributeDefaults: models.EnvQueueAttributes{VisibilityTimeout: 30, MaximumMessageSize: 262_144},
		}
		srv := &http.Server{Handler: router.New(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		goawsEndpoint = "http://" + ln.Addr().String()
	})
	return goawsEndpoint, startErr
}

var goawsEndpoint string

// newSQS is a standard queue of its own on goaws v0.5.4 in this process (its
// SendMessageBatch answer is not in the shape the SDK reads, so the sink runs
// Unbatched); the plain loop sends the same messages with SendMessage, inFlight at
// once.
func newSQS(ctx context.Context) (*broker, error) {
	endpoint, err := startGoaws(ctx)
	if err != nil {
		return nil, fmt.Errorf("start goaws: %w", err)
	}
	client := sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "bench", SecretAccessKey: "bench"}, nil
		}),
	})
	name := fmt.Sprintf("sinkbench-%d-%d", os.Getpid(), time.Now().UnixNano())
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		return nil, fmt.Errorf("create queue %s: %w", name, err)
	}
	b := &broker{closers: []func(){func() { _, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) }}}
	sink, err := sqssink.New(client, &sqssink.Config{Queue: name, Unbatched: true})
	if err != nil {
		b.close()
		return nil, err
	}
	b.sink = sink
	enc := encoder(sinkformat.SQS)
	b.plain = func(ctx context.Context, rows []row) error {
		return parallel(len(rows), func(i int) error {
			attrs := make(map[string]types.MessageAttributeValue)
			for _, h := range enc(rows[i].m) {
				attrs[h.Name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(h.Value)}
			}
			_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(string(rows[i].m.Payload)), MessageAttributes: attrs})
			return err
		})
	}
	return b, nil
}
