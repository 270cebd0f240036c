package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/sirupsen/logrus"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// sqsCanary is the static secret access key of the SQS tests: goaws ignores it, and
// it must appear in no output.
const sqsCanary = "Sqs-Secret-Canary-4d91e0"

var (
	goawsOnce sync.Once
	goawsURL  string
	goawsErr  error
	// goawsMu serialises goaws's requests and our reads of its store: goaws reads its
	// global queue map without its lock in places, which the race detector flags.
	goawsMu sync.Mutex
)

// goaws starts goaws v0.5.4 (an SQS fake) in this process once, as the sqssink tests
// do (its state is global: tests use queues of their own names), and returns its
// endpoint. Its server goroutine is the one TestMain allows.
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
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// sqsAdmin returns an SDK client of goaws whose idle connections close when t ends.
func sqsAdmin(t *testing.T, endpoint string) *sqs.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), HTTPClient: &http.Client{Transport: tr},
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
	})
}

// goawsMessage is one message as goaws's store holds it.
type goawsMessage struct {
	body, group, dedupID string
	attrs                map[string]string
}

// goawsStored reads goaws's store of queue, in order, without consuming it.
func goawsStored(t *testing.T, name string) []goawsMessage {
	t.Helper()
	goawsMu.Lock()
	defer goawsMu.Unlock()
	models.SyncQueues.RLock()
	defer models.SyncQueues.RUnlock()
	q, ok := models.SyncQueues.Queues[name]
	if !ok {
		t.Fatalf("goaws has no queue %s", name)
	}
	var out []goawsMessage
	for _, m := range q.Messages {
		g := goawsMessage{body: m.MessageBody, group: m.GroupID, dedupID: m.DeduplicationID, attrs: map[string]string{}}
		for n, a := range m.MessageAttributes {
			g.attrs[n] = a.StringValue
		}
		out = append(out, g)
	}
	return out
}

// goawsRevealInFlight makes every message a receive left in flight visible again (as
// the visibility timeout would: a receive whose answer the SDK dropped and retried
// leaves its messages in flight) and returns how many the queue still holds.
func goawsRevealInFlight(name string) int {
	goawsMu.Lock()
	defer goawsMu.Unlock()
	models.SyncQueues.Lock()
	defer models.SyncQueues.Unlock()
	q := models.SyncQueues.Queues[name]
	if q == nil {
		return 0
	}
	for i := range q.Messages {
		q.Messages[i].ReceiptHandle = ""
	}
	return len(q.Messages)
}

// TestRelayToSQS: sink.type sqs relays every event from PostgreSQL to a FIFO queue of
// goaws, through the standard AWS configuration with the region, the endpoint override
// and static keys of sink.sqs.*: each event one message, its id the id attribute and
// the deduplication id, its aggregate the message group, its payload the body; a
// consumer's ReceiveMessage reads them back with their attributes. Each publish span
// says messaging.system aws_sqs. The static secret key, like the database password,
// appears in no output.
func TestRelayToSQS(t *testing.T) {
	t.Parallel()
	endpoint := goaws(t)
	admin := sqsAdmin(t, endpoint)
	queue := fmt.Sprintf("outbox-cli-test-%d-%d.fifo", os.Getpid(), time.Now().UnixNano())
	created, err := admin.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: created.QueueUrl})
	})

	dsn, pool := database(t)
	insert(t, pool, "order.created", "order", 30, 3, 0)
	want, aggregate := map[string]string{}, map[string]string{} // event id → payload, aggregate id
	rows, err := pool.Query(t.Context(), `SELECT id::text, payload::text, aggregate_id FROM outbox.events`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, payload, agg string
		if err := rows.Scan(&id, &payload, &agg); err != nil {
			t.Fatal(err)
		}
		want[id], aggregate[id] = payload, agg
	}
	if rows.Err() != nil || len(want) != 30 {
		t.Fatalf("%d events (%v), want 30", len(want), rows.Err())
	}

	file := writeFile(t, "sink:\n  sqs:\n    region: eu-west-1\n    access_key_id: AKIDOUTBOXTEST\n")
	env := []string{
		"OUTBOX_CONFIG=" + file, "OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_SINK_TYPE=sqs",
		"OUTBOX_SINK_SQS_QUEUE=" + queue, "OUTBOX_SINK_SQS_ENDPOINT=" + endpoint,
		"OUTBOX_SINK_SQS_SECRET_ACCESS_KEY=" + sqsCanary, "OUTBOX_SINK_SQS_UNBATCHED=true",
		"OUTBOX_HTTP_LISTEN=127.0.0.1:0", "OUTBOX_SINK_JSONL_PATH=" + filepath.Join(t.TempDir(), "unused"),
	}
	p := startInProcess(t, append(env, "OTEL_TRACES_EXPORTER=console"))
	sinktest.WaitFor(t, 30*time.Second, "every event marked published", func() bool {
		return scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	})
	p.stop(t)
	noSecret(t, p.stdout.String()+p.stderr.String(), sqsCanary)
	if n := strings.Count(p.stdout.String(), `"Key":"messaging.system","Value":{"Type":"STRING","Value":"aws_sqs"}`); n != 30 {
		t.Errorf("%d publish spans with messaging.system aws_sqs on stdout, want 30", n)
	}

	stored := goawsStored(t, queue)
	if len(stored) != 30 {
		t.Fatalf("the queue holds %d messages, want 30: one per event", len(stored))
	}
	for _, m := range stored {
		id := m.attrs[sinkformat.HeaderID]
		payload, ok := want[id]
		switch {
		case !ok:
			t.Errorf("a message whose id attribute %q is no event's: %+v", id, m)
		case m.dedupID != id:
			t.Errorf("event %s: MessageDeduplicationId %q, want the event id", id, m.dedupID)
		case !jsonEqual(m.body, payload):
			t.Errorf("event %s: body %q, want the payload %s", id, m.body, payload)
		case m.group != sqssink.GroupID("order", aggregate[id]):
			t.Errorf("event %s: MessageGroupId %q, want the aggregate's %q", id, m.group, sqssink.GroupID("order", aggregate[id]))
		}
	}

	// A consumer's path: ReceiveMessage with every attribute, DeleteMessage.
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for len(got) < 30 && ctx.Err() == nil {
		out, err := admin.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: created.QueueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			if goawsRevealInFlight(queue) == 0 {
				break
			}
			continue
		}
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageAttributes[sinkformat.HeaderID].StringValue)
			if _, ok := want[id]; !ok {
				t.Errorf("received a message whose id attribute %q is no event's: %v", id, m.MessageAttributes)
			}
			if et := m.MessageAttributes[sinkformat.HeaderEventType]; aws.ToString(et.StringValue) != "order.created" || aws.ToString(et.DataType) != "String" {
				t.Errorf("event %s: %s attribute %+v, want the String order.created", id, sinkformat.HeaderEventType, et)
			}
			got[id] = true
			if _, err := admin.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: created.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != 30 {
		t.Errorf("received %d distinct events, want 30", len(got))
	}

	// outbox config masks the static secret key.
	r := run(t, env, "config")
	noSecret(t, r.stdout+r.stderr, sqsCanary)
	if r.code != 0 || !strings.Contains(r.stdout, "sink.sqs.access_key_id") {
		t.Errorf("outbox config:\n%s", r)
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// TestSQSConfigRefusals: a bad sink.sqs value is refused by its key, variable or flag,
// with exit code 2 and nothing done; the static secret key appears in none of them.
func TestSQSConfigRefusals(t *testing.T) {
	t.Parallel()
	secret := "OUTBOX_SINK_SQS_SECRET_ACCESS_KEY=" + sqsCanary
	for _, tc := range []struct {
		name string
		file string
		env  []string
		args []string
		want string
	}{
		{"unknown key", "sink:\n  sqs:\n    queue_url: orders\n", []string{secret}, []string{"config"}, "sink.sqs.queue_url: line 3: unknown key"},
		{"unknown variable", "", []string{secret, "OUTBOX_SINK_SQS_QUEUE_URL=orders"}, []string{"config"}, "environment: OUTBOX_SINK_SQS_QUEUE_URL: unknown variable"},
		{"message size", "", []string{secret, "OUTBOX_SINK_SQS_MAX_MESSAGE_BYTES=12"}, []string{"config"}, "OUTBOX_SINK_SQS_MAX_MESSAGE_BYTES: must be between 1024 and 1048576, got 12"},
		{"endpoint", "", []string{secret}, []string{"config", "--sink-sqs-endpoint", "localhost:4566"}, `flag: --sink-sqs-endpoint: must be an http:// or https:// URL`},
		{"queue template", "sink:\n  sqs:\n    queue: '{{.Nope'\n", []string{secret}, []string{"config"}, "sink.sqs.queue: must be a queue name or URL template"},
		{"unbatched", "", []string{secret, "OUTBOX_SINK_SQS_UNBATCHED=maybe"}, []string{"config"}, `OUTBOX_SINK_SQS_UNBATCHED: must be true or false, got "maybe"`},
		{"bad type", "", nil, []string{"config", "--sink-type", "sns"}, `--sink-type: must be one of jsonl, http, nats, kafka, redis, amqp, sqs, got "sns"`},
		{"no queue", "", []string{secret, "OUTBOX_SINK_SQS_ACCESS_KEY_ID=AKID"}, []string{"relay", "--sink-type", "sqs"}, "sink.sqs.queue is required with sink.type sqs"},
		{"key without secret", "", []string{"OUTBOX_SINK_SQS_ACCESS_KEY_ID=AKID"}, []string{"relay", "--sink-type", "sqs", "--sink-sqs-queue", "orders"}, "sink.sqs.access_key_id and sink.sqs.secret_access_key go together"},
		{"secret without key", "", []string{secret}, []string{"relay", "--sink-type", "sqs", "--sink-sqs-queue", "orders"}, "sink.sqs.access_key_id and sink.sqs.secret_access_key go together"},
		{"token without keys", "", []string{"OUTBOX_SINK_SQS_SESSION_TOKEN=" + sqsCanary}, []string{"relay", "--sink-type", "sqs", "--sink-sqs-queue", "orders"}, "sink.sqs.session_token needs sink.sqs.access_key_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := append([]string{"OUTBOX_DATABASE_URL=postgres://u:" + canary + "@127.0.0.1:1/db", "OUTBOX_HTTP_LISTEN="}, tc.env...)
			if tc.file != "" {
				env = append(env, "OUTBOX_CONFIG="+writeFile(t, tc.file))
			}
			r := run(t, env, tc.args...)
			noSecret(t, r.stdout+r.stderr, sqsCanary)
			if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("want exit 2 and one line with %q\n%s", tc.want, r)
			}
		})
	}
}

// TestSQSConfigPrecedence: the sink.sqs keys follow flags > OUTBOX_* > the file, and
// outbox config shows the static secret key and session token masked.
func TestSQSConfigPrecedence(t *testing.T) {
	t.Parallel()
	file := writeFile(t, `
sink:
  type: sqs
  sqs:
    queue: from-file.fifo
    region: eu-west-1
    endpoint: http://127.0.0.1:4566
    access_key_id: AKIDFILE
    secret_access_key: `+sqsCanary+`
    request_timeout: 3s
`)
	env := []string{
		"OUTBOX_CONFIG=" + file, "OUTBOX_SINK_SQS_REGION=us-west-2", "OUTBOX_SINK_SQS_QUEUE=from-env",
		"OUTBOX_SINK_SQS_SESSION_TOKEN=" + sqsCanary + "-token",
	}
	r := run(t, env, "config", "--sink-sqs-queue", "from-flag.fifo")
	noSecret(t, r.stdout+r.stderr, sqsCanary)
	if r.code != 0 {
		t.Fatalf("outbox config:\n%s", r)
	}
	for key, want := range map[string][]string{
		"sink.type":                  {"sqs", "config", "file", file},
		"sink.sqs.queue":             {"from-flag.fifo", "--sink-sqs-queue"},
		"sink.sqs.region":            {"us-west-2", "OUTBOX_SINK_SQS_REGION"},
		"sink.sqs.endpoint":          {"http://127.0.0.1:4566", "config", "file", file},
		"sink.sqs.access_key_id":     {"AKIDFILE", "config", "file", file},
		"sink.sqs.request_timeout":   {"3s", "config", "file", file},
		"sink.sqs.max_message_bytes": {"262144", "default"},
	} {
		if got := line(t, r, key)[1:]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %q, want %q", key, got, want)
		}
	}
	for _, key := range []string{"sink.sqs.secret_access_key", "sink.sqs.session_token"} {
		if got := line(t, r, key); len(got) < 2 || strings.Contains(got[1], "Canary") {
			t.Errorf("%s: %q", key, got)
		}
	}
}
