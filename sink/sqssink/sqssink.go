// Package sqssink is an [outbox.Sink] for Amazon SQS, standard and FIFO queues, on
// the AWS SDK for Go v2.
//
// Events go out in SendMessageBatch calls of up to 10 entries, each entry's result
// classified on its own. The body is the payload when it is text SQS takes (valid
// UTF-8 of the characters SQS allows); any other payload travels in base64, and an
// empty one as "-", the message attribute outbox-payload-encoding saying which
// ("base64", "empty"). Message attributes carry the headers of the shared message
// format (docs/message-format.md): each header is one String attribute while they fit
// SQS's limit of 10; otherwise the first nine that can be attributes are, and the rest
// travel together in the attribute outbox-headers, a JSON object of names to values
// (a header whose name SQS does not take as an attribute name, or whose value is
// empty, always goes there).
//
// On a FIFO queue (its name ends in ".fifo") MessageGroupId is the aggregate, so SQS
// keeps each aggregate's order, and MessageDeduplicationId is the event id, so a
// republish within SQS's 5-minute deduplication interval is stored once. A standard
// queue keeps no order and may deliver a message more than once: the sink still sends
// each aggregate's messages in order, and consumers deduplicate by the id attribute.
// A call sends the next message of every aggregate (in batches, at once), gathers the
// results, then sends the next ones, so a message whose predecessor failed is never
// sent.
//
// Durability: SQS acknowledges a message once it is stored redundantly across
// availability zones.
package sqssink

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// The attributes the sink adds beside the headers.
const (
	// AttributePayloadEncoding says how the body holds the payload when it is not
	// the payload itself: "base64" or "empty".
	AttributePayloadEncoding = "outbox-payload-encoding"
	// AttributeHeaders holds, as a JSON object, the headers that are not attributes
	// of their own.
	AttributeHeaders = "outbox-headers"
)

// DefaultMaxMessageBytes is the MaxMessageBytes of a Config without one.
const DefaultMaxMessageBytes = 262_144

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = 10

// API is the part of *sqs.Client the sink uses.
type API interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Config configures a [Sink]. Zero fields take the defaults given at each.
type Config struct {
	// Queue is a text/template over the [outbox.Message] giving the queue of an event
	// whose Topic is empty: a queue name, looked up once with GetQueueUrl, or a queue
	// URL. A set Topic is the queue name itself. A FIFO queue's name ends in ".fifo".
	// Required.
	Queue string
	// MaxMessageBytes is the largest message the sink sends, counted as SQS counts
	// it: the body and every attribute's name, type and value; it also bounds a
	// batch's total. A larger event fails permanently. Default
	// [DefaultMaxMessageBytes] (256 KiB, the limit SQS queues have long had); set it to
	// the queue's MaximumMessageSize when that is larger.
	MaxMessageBytes int
	// RequestTimeout bounds each SendMessageBatch and GetQueueUrl call, the client's
	// own retries included. Default 10s.
	RequestTimeout time.Duration
	// MaxInFlight bounds the SendMessageBatch calls one Publish call makes at once.
	// Default 8.
	MaxInFlight int
	// Unbatched sends each message with a SendMessage call of its own, for an
	// SQS-compatible service without a usable SendMessageBatch (goaws v0.5.4 answers it
	// in a shape the SDK cannot read). Default false: batches of up to 10.
	Unbatched bool
	// Format of the attributes: [sinkformat.Outbox] (default) or [sinkformat.CloudEvents].
	Format sinkformat.Format
	// Source is the CloudEvents source attribute. Default [sinkformat.DefaultSource].
	Source string
	// Logger: default discard.
	Logger *slog.Logger
}

// Sink sends events to SQS. It is safe for concurrent use.
type Sink struct {
	client  API
	cfg     Config
	router  *sinkformat.Router
	encoder *sinkformat.Encoder
	urls    sync.Map // queue name → URL
}

// New returns a sink sending through client (an *sqs.Client); it calls nothing until
// the first Publish.
func New(client API, cfg *Config) (*Sink, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("sqssink: %w", err)
	}
	if client == nil {
		return nil, errors.New("sqssink: a client is required")
	}
	router, err := sinkformat.NewRouter(c.Queue, sinkformat.SQSQueue)
	if err != nil {
		return nil, fmt.Errorf("sqssink: Queue: %w", err)
	}
	encoder, err := sinkformat.NewEncoder(sinkformat.SQS, c.Format, c.Source)
	if err != nil {
		return nil, fmt.Errorf("sqssink: %w", err)
	}
	return &Sink{client: client, cfg: c, router: router, encoder: encoder}, nil
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 10*time.Second)
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, 8)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.Queue == "" {
		errs = append(errs, errors.New("Queue is required"))
	}
	if cfg.MaxMessageBytes < 1024 {
		errs = append(errs, fmt.Errorf("MaxMessageBytes must be at least 1024, got %d", cfg.MaxMessageBytes))
	}
	if cfg.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout must be positive, got %s", cfg.RequestTimeout))
	}
	if cfg.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("MaxInFlight must be positive, got %d", cfg.MaxInFlight))
	}
	return cfg, errors.Join(errs...)
}

// entry is one message, ready to send.
type entry struct {
	queue string // name or URL, as routed
	in    types.SendMessageBatchRequestEntry
	size  int
}

// Publish sends msgs wave by wave and returns one result per message: nil once SQS
// stored it (a FIFO duplicate too), [outbox.Permanent] for an entry SQS refused as
// the sender's fault, a queue that does not exist, or a message that cannot be sent
// (too large, a forbidden queue name or header), [outbox.Unavailable] when SQS cannot
// be reached or refuses the credentials, a plain error for throttling, a server
// error or a timeout, ctx's error when it ends first, and [outbox.ErrNotSent] after
// an earlier message of the same aggregate failed.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	plan := sinkformat.NewPlan(ctx, msgs)
	entries := make([]entry, len(msgs))
	for i := range msgs {
		e, err := s.entry(&msgs[i])
		if err != nil {
			plan.Fail(i, outbox.Permanent(fmt.Errorf("sqssink: event %s: %w", msgs[i].ID, err)))
			continue
		}
		entries[i] = e
	}
	for wave := plan.Next(); wave != nil; wave = plan.Next() {
		if err := ctx.Err(); err != nil {
			plan.FailRest(err)
			break
		}
		for i, err := range s.sendWave(ctx, msgs, entries, wave) {
			plan.Fail(i, err)
		}
	}
	return plan.Errors()
}

// entry builds m's queue and batch entry.
func (s *Sink) entry(m *outbox.Message) (entry, error) {
	queue, err := s.router.Route(m)
	if err != nil {
		return entry{}, err
	}
	headers, err := s.encoder.Headers(*m)
	if err != nil {
		return entry{}, err
	}
	body, encoding := m.Payload, ""
	switch {
	case len(body) == 0:
		body, encoding = []byte("-"), "empty"
	case !sqsText(body):
		body, encoding = base64.StdEncoding.AppendEncode(nil, body), "base64"
	}
	var special []sinkformat.Header
	if encoding != "" {
		special = append(special, sinkformat.Header{Name: AttributePayloadEncoding, Value: encoding})
	}
	attrs, err := attributes(special, headers)
	if err != nil {
		return entry{}, err
	}
	size := len(body)
	for name, a := range attrs {
		size += len(name) + len(*a.DataType) + len(*a.StringValue)
	}
	if size > s.cfg.MaxMessageBytes {
		return entry{}, fmt.Errorf("the message takes %d bytes (body and attributes), over MaxMessageBytes %d", size, s.cfg.MaxMessageBytes)
	}
	e := entry{queue: queue, size: size, in: types.SendMessageBatchRequestEntry{MessageBody: aws.String(string(body)), MessageAttributes: attrs}}
	if isFIFO(queue) {
		e.in.MessageGroupId = aws.String(GroupID(m.AggregateType, m.AggregateID))
		e.in.MessageDeduplicationId = aws.String(m.ID.String())
	}
	return e, nil
}

// attributes lays out special then headers as message attributes: each its own while
// all fit, otherwise as many as fit beside one outbox-headers attribute holding the
// rest.
func attributes(special, headers []sinkformat.Header) (map[string]types.MessageAttributeValue, error) {
	all := append(special, headers...)
	for _, h := range all {
		if !sqsText([]byte(h.Value)) {
			return nil, fmt.Errorf("%w: %s: value holds a character SQS does not take", sinkformat.ErrHeader, h.Name)
		}
	}
	own := 0
	for _, h := range all {
		if attributeName(h.Name) && h.Value != "" {
			own++
		}
	}
	room := maxAttributes
	if own < len(all) || len(all) > maxAttributes {
		room = maxAttributes - 1 // one for outbox-headers
	}
	attrs := make(map[string]types.MessageAttributeValue, min(len(all), maxAttributes))
	rest := make(map[string]string)
	for _, h := range all {
		if len(attrs) < room && attributeName(h.Name) && h.Value != "" {
			attrs[h.Name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(h.Value)}
			continue
		}
		rest[h.Name] = h.Value
	}
	if len(rest) > 0 {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rest); err != nil {
			return nil, fmt.Errorf("%w: encode %s: %w", sinkformat.ErrHeader, AttributeHeaders, err)
		}
		attrs[AttributeHeaders] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(strings.TrimSuffix(b.String(), "\n"))}
	}
	return attrs, nil
}

// attributeName reports whether SQS takes name as a message attribute name: up to
// 256 of [A-Za-z0-9_.-], no "." at either end or twice in a row, not starting with
// "AWS." or "Amazon." (the binding reserves those).
func attributeName(name string) bool {
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	return strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == ""
}

// sqsText reports whether b is text SQS takes in a body or attribute: valid UTF-8 of
// #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD and #x10000 to #x10FFFF.
func sqsText(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n <= 1:
			return false
		case r == 0x9 || r == 0xA || r == 0xD, r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
		b = b[n:]
	}
	return true
}

// GroupID is the MessageGroupId of an aggregate on a FIFO queue: its type and id,
// each escaped by [sinkformat.Escape] and joined by ".", when that fits SQS's 128
// characters; otherwise "sha256-" and the hex SHA-256 of type, a NUL and id.
func GroupID(aggregateType, aggregateID string) string {
	if g := sinkformat.Escape(aggregateType) + "." + sinkformat.Escape(aggregateID); len(g) <= 128 {
		return g
	}
	sum := sha256.Sum256([]byte(aggregateType + "\x00" + aggregateID))
	return "sha256-" + hex.EncodeToString(sum[:])
}

func isFIFO(queue string) bool { return strings.HasSuffix(queue, ".fifo") }

// batch is up to 10 entries for one queue.
type batch struct {
	url string
	idx []int // message indexes
}

// sendWave sends one wave's entries, grouped by queue and cut into batches sent at
// once, and returns the failures by message index.
func (s *Sink) sendWave(ctx context.Context, msgs []outbox.Message, entries []entry, wave []int) map[int]error {
	failed := make(map[int]error)
	var batches []batch
	byQueue := make(map[string]int) // queue → its open batch
	for _, i := range wave {
		e := entries[i]
		url, err := s.queueURL(ctx, e.queue)
		if err != nil {
			failed[i] = fmt.Errorf("sqssink: event %s: %w", msgs[i].ID, err)
			continue
		}
		b, ok := byQueue[url]
		if ok && (len(batches[b].idx) == s.batchEntries() || batchSize(entries, batches[b].idx)+e.size > s.cfg.MaxMessageBytes) {
			ok = false
		}
		if !ok {
			b = len(batches)
			byQueue[url] = b
			batches = append(batches, batch{url: url})
		}
		batches[b].idx = append(batches[b].idx, i)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, s.cfg.MaxInFlight)
	for _, b := range batches {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs := s.sendBatch(ctx, msgs, entries, b)
			mu.Lock()
			defer mu.Unlock()
			for i, err := range errs {
				failed[i] = err
			}
		})
	}
	wg.Wait()
	return failed
}

func batchSize(entries []entry, idx []int) int {
	n := 0
	for _, i := range idx {
		n += entries[i].size
	}
	return n
}

// queueURL returns the URL of queue (a name or a URL), looking a name up once.
func (s *Sink) queueURL(ctx context.Context, queue string) (string, error) {
	if strings.HasPrefix(queue, "https://") || strings.HasPrefix(queue, "http://") {
		return queue, nil
	}
	if url, ok := s.urls.Load(queue); ok {
		return url.(string), nil
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	out, err := s.client.GetQueueUrl(rctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		return "", classify(ctx, fmt.Errorf("look up queue %q: %w", queue, err))
	}
	url := aws.ToString(out.QueueUrl)
	s.urls.Store(queue, url)
	return url, nil
}

// batchEntries is the most entries in one batch.
func (s *Sink) batchEntries() int {
	if s.cfg.Unbatched {
		return 1
	}
	return 10
}

// sendBatch sends one batch and returns the failures by message index.
func (s *Sink) sendBatch(ctx context.Context, msgs []outbox.Message, entries []entry, b batch) map[int]error {
	if s.cfg.Unbatched {
		i := b.idx[0]
		if err := s.sendOne(ctx, &msgs[i], entries[i], b.url); err != nil {
			return map[int]error{i: err}
		}
		return nil
	}
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(b.url), Entries: make([]types.SendMessageBatchRequestEntry, len(b.idx))}
	for n, i := range b.idx {
		in.Entries[n] = entries[i].in
		in.Entries[n].Id = aws.String(strconv.Itoa(n))
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	out, err := s.client.SendMessageBatch(rctx, in)
	failed := make(map[int]error, len(b.idx))
	if err != nil {
		err = classify(ctx, fmt.Errorf("SendMessageBatch to %s: %w", b.url, err))
		for _, i := range b.idx {
			failed[i] = fmt.Errorf("sqssink: event %s: %w", msgs[i].ID, err)
		}
		return failed
	}
	answered := make(map[string]bool, len(b.idx))
	for _, ok := range out.Successful {
		answered[aws.ToString(ok.Id)] = true
	}
	for _, f := range out.Failed {
		n, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || n < 0 || n >= len(b.idx) {
			continue
		}
		answered[aws.ToString(f.Id)] = true
		i := b.idx[n]
		e := fmt.Errorf("sqssink: event %s: %s refused the entry: %s: %s", msgs[i].ID, b.url, aws.ToString(f.Code), aws.ToString(f.Message))
		if f.SenderFault && !throttled(aws.ToString(f.Code)) {
			e = outbox.Permanent(e)
		}
		failed[i] = e
	}
	for n, i := range b.idx {
		if !answered[strconv.Itoa(n)] {
			failed[i] = fmt.Errorf("sqssink: event %s: SendMessageBatch to %s returned no result for its entry", msgs[i].ID, b.url)
		}
	}
	return failed
}

// sendOne sends one message with SendMessage. An error SQS blames on the sender (but
// throttling) is permanent, as for an entry of a batch.
func (s *Sink) sendOne(ctx context.Context, m *outbox.Message, e entry, url string) error {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	_, err := s.client.SendMessage(rctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: e.in.MessageBody, MessageAttributes: e.in.MessageAttributes,
		MessageGroupId: e.in.MessageGroupId, MessageDeduplicationId: e.in.MessageDeduplicationId,
	})
	if err == nil {
		return nil
	}
	var apiErr smithy.APIError
	classified := classify(ctx, fmt.Errorf("SendMessage to %s: %w", url, err))
	if !outbox.IsPermanent(classified) && !outbox.IsUnavailable(classified) && ctx.Err() == nil &&
		errors.As(err, &apiErr) && apiErr.ErrorFault() == smithy.FaultClient && !throttled(apiErr.ErrorCode()) {
		classified = outbox.Permanent(classified)
	}
	return fmt.Errorf("sqssink: event %s: %w", m.ID, classified)
}

// throttled reports whether an error code asks the sender to slow down.
func throttled(code string) bool {
	switch code {
	case "RequestThrottled", "ThrottlingException", "Throttling", "OverLimit", "KmsThrottled", "KMS.ThrottlingException":
		return true
	}
	return false
}

// classify marks a failed call by the failure classes of [outbox.Sink].
func classify(ctx context.Context, err error) error {
	var apiErr smithy.APIError
	var netErr net.Error
	var sendErr *smithyhttp.RequestSendError
	var dnsErr *net.DNSError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", err, ctx.Err())
	case errors.As(err, &apiErr):
		switch code := apiErr.ErrorCode(); code {
		case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist":
			return outbox.Permanent(err)
		case "InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch", "ExpiredToken",
			"AccessDenied", "AccessDeniedException", "InvalidSecurity", "MissingAuthenticationToken",
			"InvalidAccessKeyId", "RequestExpired", "KMS.AccessDeniedException", "KMS.DisabledException":
			return outbox.Unavailable(err) // a credential or key problem: nothing is sent until it is fixed
		}
		return err
	case errors.As(err, &netErr) && netErr.Timeout():
		return err // no answer in time: SQS may have stored it
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return err
	case errors.As(err, &sendErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.As(err, new(*net.OpError)):
		return outbox.Unavailable(err)
	}
	return err
}
