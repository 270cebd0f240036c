package sqssink_test

import (
	"crypto/md5" //nolint:gosec // SQS's own checksum of bodies and attributes
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// fakeSQS is a small SQS of our own, speaking the AWS JSON 1.0 protocol the SDK uses,
// for what goaws does not do: per-entry failures in a batch, and FIFO deduplication by
// MessageDeduplicationId over SQS's 5-minute interval (a duplicate is acknowledged
// with the first copy's message id and not stored again). It checks what SQS checks
// of a batch: at most 10 entries with distinct ids, a total within 256 KiB, at most 10
// attributes per message, and on a FIFO queue a group id and a deduplication id on
// every entry.
type fakeSQS struct {
	srv *httptest.Server

	mu     sync.Mutex
	queues map[string]*fakeQueue // by name
	refuse func(e fakeEntry) bool
}

type fakeQueue struct {
	name, url string
	fifo      bool
	stored    []fakeEntry
	dedup     map[string]fakeDedup
}

type fakeDedup struct {
	messageID string
	at        time.Time
}

// fakeEntry is an entry as the SDK sends it, and as the fake stores it.
type fakeEntry struct {
	ID                     string               `json:"Id"`
	MessageBody            string               `json:"MessageBody"`
	MessageAttributes      map[string]fakeValue `json:"MessageAttributes,omitempty"`
	MessageGroupID         string               `json:"MessageGroupId,omitempty"`
	MessageDeduplicationID string               `json:"MessageDeduplicationId,omitempty"`
}

type fakeValue struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
}

func newFakeSQS(t *testing.T) *fakeSQS {
	f := &fakeSQS{queues: make(map[string]*fakeQueue)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// createQueue creates a queue and returns its URL.
func (f *fakeSQS) createQueue(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := &fakeQueue{name: name, url: f.srv.URL + "/000000000000/" + name, fifo: strings.HasSuffix(name, ".fifo"), dedup: make(map[string]fakeDedup)}
	f.queues[name] = q
	return q.url
}

// setRefuse makes the fake refuse, per entry, the entries refuse names (nil: none), as
// SQS refuses an invalid entry: InvalidMessageContents, the sender's fault.
func (f *fakeSQS) setRefuse(refuse func(e fakeEntry) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
}

// messages returns what queue stores, in order.
func (f *fakeSQS) messages(name string) []fakeEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeEntry(nil), f.queues[name].stored...)
}

type fakeError struct {
	status     int
	code, text string
	query      string // the x-amzn-query-error code, as SQS sends it
}

func (f *fakeSQS) serve(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	var in map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeFakeError(w, fakeError{400, "InvalidParameterValue", err.Error(), ""})
		return
	}
	var out any
	var ferr *fakeError
	switch op {
	case "GetQueueUrl":
		out, ferr = f.getQueueURL(in)
	case "SendMessageBatch":
		out, ferr = f.sendMessageBatch(in)
	default:
		ferr = &fakeError{400, "InvalidAction", "the fake does not do " + op, ""}
	}
	if ferr != nil {
		writeFakeError(w, *ferr)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

func writeFakeError(w http.ResponseWriter, e fakeError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if e.query != "" {
		w.Header().Set("x-amzn-query-error", e.query+";Sender")
	}
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + e.code, "message": e.text})
}

func (f *fakeSQS) queue(name string) (*fakeQueue, *fakeError) {
	if q, ok := f.queues[name]; ok {
		return q, nil
	}
	return nil, &fakeError{400, "QueueDoesNotExist", "The specified queue does not exist.", "AWS.SimpleQueueService.NonExistentQueue"}
}

func (f *fakeSQS) getQueueURL(in map[string]json.RawMessage) (any, *fakeError) {
	var name string
	_ = json.Unmarshal(in["QueueName"], &name)
	f.mu.Lock()
	defer f.mu.Unlock()
	q, err := f.queue(name)
	if err != nil {
		return nil, err
	}
	return map[string]string{"QueueUrl": q.url}, nil
}

type fakeResult struct {
	ID                     string `json:"Id"`
	MessageID              string `json:"MessageId"`
	MD5OfMessageBody       string `json:"MD5OfMessageBody"`
	MD5OfMessageAttributes string `json:"MD5OfMessageAttributes,omitempty"`
}

type fakeFailure struct {
	ID          string `json:"Id"`
	Code        string `json:"Code"`
	Message     string `json:"Message"`
	SenderFault bool   `json:"SenderFault"`
}

func (f *fakeSQS) sendMessageBatch(in map[string]json.RawMessage) (any, *fakeError) {
	var url string
	var entries []fakeEntry
	_ = json.Unmarshal(in["QueueUrl"], &url)
	if err := json.Unmarshal(in["Entries"], &entries); err != nil {
		return nil, &fakeError{400, "InvalidParameterValue", err.Error(), ""}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ferr := f.queue(url[strings.LastIndexByte(url, '/')+1:])
	if ferr != nil {
		return nil, ferr
	}
	switch {
	case len(entries) == 0:
		return nil, &fakeError{400, "EmptyBatchRequest", "no entries", "AWS.SimpleQueueService.EmptyBatchRequest"}
	case len(entries) > 10:
		return nil, &fakeError{400, "TooManyEntriesInBatchRequest", fmt.Sprintf("%d entries", len(entries)), "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"}
	}
	ids, total := make(map[string]bool), 0
	for _, e := range entries {
		if ids[e.ID] {
			return nil, &fakeError{400, "BatchEntryIdsNotDistinct", e.ID, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"}
		}
		ids[e.ID] = true
		total += messageSize(e)
	}
	if total > 262_144 {
		return nil, &fakeError{400, "BatchRequestTooLong", fmt.Sprintf("%d bytes", total), "AWS.SimpleQueueService.BatchRequestTooLong"}
	}
	out := struct {
		Successful []fakeResult  `json:"Successful"`
		Failed     []fakeFailure `json:"Failed"`
	}{Successful: []fakeResult{}, Failed: []fakeFailure{}}
	for _, e := range entries {
		fail := func(code, text string) { out.Failed = append(out.Failed, fakeFailure{e.ID, code, text, true}) }
		switch {
		case len(e.MessageAttributes) > 10:
			fail("InvalidParameterValue", fmt.Sprintf("%d message attributes, at most 10", len(e.MessageAttributes)))
			continue
		case q.fifo && e.MessageGroupID == "":
			fail("MissingParameter", "The request must contain the parameter MessageGroupId.")
			continue
		case q.fifo && e.MessageDeduplicationID == "":
			fail("InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
			continue
		case !q.fifo && e.MessageDeduplicationID != "":
			fail("InvalidParameterValue", "The request include parameter that is not valid for this queue type")
			continue
		case f.refuse != nil && f.refuse(e):
			fail("InvalidMessageContents", "refused by the test")
			continue
		}
		res := fakeResult{ID: e.ID, MessageID: uuid.NewString(), MD5OfMessageBody: md5Hex([]byte(e.MessageBody)), MD5OfMessageAttributes: md5Attributes(e.MessageAttributes)}
		if d, ok := q.dedup[e.MessageDeduplicationID]; q.fifo && ok && time.Since(d.at) < 5*time.Minute {
			res.MessageID = d.messageID // a duplicate: acknowledged, not stored again
		} else {
			if q.fifo {
				q.dedup[e.MessageDeduplicationID] = fakeDedup{res.MessageID, time.Now()}
			}
			q.stored = append(q.stored, e)
		}
		out.Successful = append(out.Successful, res)
	}
	return out, nil
}

// messageSize counts a message as SQS does: its body and every attribute's name,
// type and value.
func messageSize(e fakeEntry) int {
	n := len(e.MessageBody)
	for name, v := range e.MessageAttributes {
		n += len(name) + len(v.DataType) + len(v.StringValue)
	}
	return n
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b) //nolint:gosec // SQS's checksum
	return hex.EncodeToString(sum[:])
}

// md5Attributes is SQS's checksum of message attributes: over the names in order,
// each name, type and value length-prefixed, the value after a transport byte (1:
// string).
func md5Attributes(attrs map[string]fakeValue) string {
	if len(attrs) == 0 {
		return ""
	}
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	sort.Strings(names)
	h := md5.New() //nolint:gosec // SQS's checksum
	put := func(s string) {
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		h.Write([]byte(s))
	}
	for _, name := range names {
		put(name)
		put(attrs[name].DataType)
		h.Write([]byte{1})
		put(attrs[name].StringValue)
	}
	return hex.EncodeToString(h.Sum(nil))
}
