package sqssink_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sirupsen/logrus"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// TestMain checks for leaked goroutines but for goaws's: one server for the whole test
// binary (goaws keeps its state in globals), its connections, and the SDK clients' idle
// keep-alive connections to it (an sqs.Client cannot be closed).
func TestMain(m *testing.M) {
	pgtest.Main(m, "github.com/outboxkit/outbox/sink/sqssink_test.goaws.", "net/http.(*conn).serve", "net/http.(*persistConn).")
}

var (
	goawsOnce sync.Once
	goawsURL  string
	goawsErr  error
	// goawsMu serialises goaws's requests and our reads of its store: goaws reads its
	// global queue map without its lock in places, which the race detector flags.
	goawsMu sync.Mutex
)

// goaws starts goaws v0.5.4 in this process once (its state is global: tests use
// queues of their own names) and returns its endpoint.
func goaws(t *testing.T) string {
	t.Helper()
	goawsOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			goawsErr = err
			return
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		models.CurrentEnvironment = models.Environment{
			Host: "127.0.0.1", Port: port, AccountID: "100010001000", EnableDuplicates: true,
			QueueAttributeDefaults: models.EnvQueueAttributes{VisibilityTimeout: 30, MaximumMessageSize: 262_144},
		}
		handler := router.New()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			goawsMu.Lock()
			defer goawsMu.Unlock()
			handler.ServeHTTP(w, r)
		})}
		go func() { _ = srv.Serve(ln) }()
		goawsURL = "http://" + ln.Addr().String()
	})
	if goawsErr != nil {
		t.Fatalf("start goaws: %v", goawsErr)
	}
	return goawsURL
}

// client returns an SDK client for the endpoint, with static test credentials.
func client(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
	})
}

var names atomic.Int64

// queueName returns a queue name of t's own (with ".fifo" for a FIFO queue).
func queueName(fifo bool) string {
	name := fmt.Sprintf("outbox-test-%d-%d", os.Getpid(), names.Add(1))
	if fifo {
		name += ".fifo"
	}
	return name
}

// createGoawsQueue creates a queue on goaws, deleted when t ends, and returns its name.
func createGoawsQueue(t *testing.T, c *sqs.Client, fifo bool) string {
	t.Helper()
	name := queueName(fifo)
	out, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}); err != nil {
			t.Errorf("delete queue %s: %v", name, err)
		}
	})
	return name
}

// stored is one message as a queue holds it.
type stored struct {
	body            string
	attrs           map[string]string // String attributes
	group, dedupID  string
	transportTypeOK bool
}

// goawsStored reads goaws's store of queue, in order, without consuming it.
func goawsStored(name string) ([]stored, error) {
	goawsMu.Lock()
	defer goawsMu.Unlock()
	models.SyncQueues.RLock()
	defer models.SyncQueues.RUnlock()
	q, ok := models.SyncQueues.Queues[name]
	if !ok {
		return nil, fmt.Errorf("goaws has no queue %s", name)
	}
	var out []stored
	for _, m := range q.Messages {
		s := stored{body: m.MessageBody, attrs: make(map[string]string), group: m.GroupID, dedupID: m.DeduplicationID, transportTypeOK: true}
		for name, a := range m.MessageAttributes {
			s.attrs[name] = a.StringValue
			s.transportTypeOK = s.transportTypeOK && a.DataType == "String"
		}
		out = append(out, s)
	}
	return out, nil
}

// fakeStored reads the fake's store of queue.
func fakeStored(f *fakeSQS, name string) []stored {
	var out []stored
	for _, e := range f.messages(name) {
		out = append(out, fakeStored1(e))
	}
	return out
}

// decode reads a stored message back: the attributes and those in outbox-headers
// are the headers; the body is the payload, or its base64, or "-" for an empty one.
func decode(s stored) (outbox.Message, error) {
	if !s.transportTypeOK {
		return outbox.Message{}, fmt.Errorf("an attribute is not of type String: %v", s.attrs)
	}
	var hs []sinkformat.Header
	for name, v := range s.attrs {
		switch name {
		case sqssink.AttributePayloadEncoding:
		case sqssink.AttributeHeaders:
			var rest map[string]string
			if err := json.Unmarshal([]byte(v), &rest); err != nil {
				return outbox.Message{}, fmt.Errorf("%s: %w", name, err)
			}
			for n, v := range rest {
				hs = append(hs, sinkformat.Header{Name: n, Value: v})
			}
		default:
			hs = append(hs, sinkformat.Header{Name: name, Value: v})
		}
	}
	payload := []byte(s.body)
	switch enc := s.attrs[sqssink.AttributePayloadEncoding]; enc {
	case "":
	case "base64":
		var err error
		if payload, err = base64.StdEncoding.DecodeString(s.body); err != nil {
			return outbox.Message{}, err
		}
	case "empty":
		payload = nil
	default:
		return outbox.Message{}, fmt.Errorf("unknown payload encoding %q", enc)
	}
	if len(s.attrs) > 10 {
		return outbox.Message{}, fmt.Errorf("%d attributes, SQS takes 10", len(s.attrs))
	}
	return sinkformat.Decode(sinkformat.SQS, hs, payload)
}

func decodeAll(ss []stored) ([]outbox.Message, []string, error) {
	var msgs []outbox.Message
	var ids []string
	for _, s := range ss {
		m, err := decode(s)
		if err != nil {
			return nil, nil, err
		}
		msgs, ids = append(msgs, m), append(ids, s.dedupID)
	}
	return msgs, ids, nil
}

// receiveAll consumes every message of the queue with the SDK's ReceiveMessage and
// DeleteMessage, as a consumer does, and decodes them in the order received, once
// each. A receive whose answer the SDK dropped and retried leaves its messages in
// flight on goaws (which reveals them only after the visibility timeout): an empty
// receive while goaws still holds messages makes them visible again at once and goes
// on, as a consumer would after the timeout.
func receiveAll(ctx context.Context, c *sqs.Client, name string) ([]outbox.Message, error) {
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return nil, err
	}
	var msgs []outbox.Message
	seen := make(map[string]bool)
	for {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return nil, err
		}
		if len(out.Messages) == 0 {
			if n, err := goawsRevealInFlight(name); err != nil || n == 0 {
				return msgs, err
			}
			continue
		}
		for _, m := range out.Messages {
			if !seen[aws.ToString(m.MessageId)] {
				seen[aws.ToString(m.MessageId)] = true
				s := stored{body: aws.ToString(m.Body), attrs: make(map[string]string), transportTypeOK: true}
				for name, a := range m.MessageAttributes {
					s.attrs[name] = aws.ToString(a.StringValue)
					s.transportTypeOK = s.transportTypeOK && aws.ToString(a.DataType) == "String"
				}
				msg, err := decode(s)
				if err != nil {
					return nil, err
				}
				msgs = append(msgs, msg)
			}
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				return nil, err
			}
		}
	}
}

// goawsRevealInFlight makes every message of goaws's queue that a receive left in
// flight visible again, as goaws's visibility timeout would, and returns how many
// the queue still holds.
func goawsRevealInFlight(name string) (int, error) {
	goawsMu.Lock()
	defer goawsMu.Unlock()
	models.SyncQueues.Lock()
	defer models.SyncQueues.Unlock()
	q, ok := models.SyncQueues.Queues[name]
	if !ok {
		return 0, fmt.Errorf("goaws has no queue %s", name)
	}
	for i := range q.Messages {
		q.Messages[i].ReceiptHandle = ""
	}
	return len(q.Messages), nil
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

func hostOf(endpoint string) string { return strings.TrimPrefix(endpoint, "http://") }

func message(id string) outbox.Message {
	return outbox.Message{
		ID: outbox.NewID(), AggregateType: "order", AggregateID: id, AggregateVersion: 1, EventType: "order.paid", SchemaVersion: 1,
		ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"amount": 1200}`), Attempt: 1,
	}
}
