package outbox

import (
	"fmt"
	"math"
	"mime"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/internal/emitted"
)

// Limits on text fields keep every row within what PostgreSQL's btree indexes accept
// (an index entry must fit in a third of a page), so a long value is refused here
// rather than failing inside the caller's transaction.
const (
	maxAggregateTypeBytes = 255
	maxAggregateIDBytes   = 1024
	maxEventTypeBytes     = 255
	// maxTopicBytes is Kafka's limit on a topic name, the strictest of the brokers'.
	maxTopicBytes       = 249
	maxContentTypeBytes = 255
	maxHeaderNameBytes  = 255
	maxHeadersBytes     = 64 << 10
	// maxAvailableYear bounds AvailableAt: PostgreSQL's timestamptz ends in year 294276,
	// and far before that a time no longer fits the drivers' microsecond counts.
	maxAvailableYear = 9999
)

// traceParentPattern is the W3C Trace Context traceparent header: version, trace id,
// parent id and flags in lowercase hex; a version after 00 may append fields of lowercase
// hex and dashes.
var traceParentPattern = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[0-9a-f-]*)?$`)

// topicPattern is what Event.Topic may hold: what every broker takes as a topic,
// subject or routing key as it is (Kafka's topic characters), with no empty
// dot-separated token (NATS subjects and RabbitMQ topic keys have none).
var topicPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// isJSONContentType reports whether payloads of this content type are stored as JSON
// (the payload column, of type json), rather than as bytes.
func isJSONContentType(ct string) bool { return emitted.IsJSON(ct) }

// validate checks e (the index-th event of a call) and returns it with defaults filled.
func (w *Writer) validate(index int, e Event) (Event, error) {
	fail := func(field, format string, args ...any) (Event, error) {
		return Event{}, &ValidationError{Index: index, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	for _, f := range []struct {
		name, value string
		max         int
		required    bool
		check       func(string) string // beyond text: why the value is refused, or ""
	}{
		{"AggregateType", e.AggregateType, maxAggregateTypeBytes, true, checkName},
		{"AggregateID", e.AggregateID, maxAggregateIDBytes, true, checkNoControls},
		{"EventType", e.EventType, maxEventTypeBytes, true, checkName},
		{"Topic", e.Topic, maxTopicBytes, false, checkTopic},
		{"ContentType", e.ContentType, maxContentTypeBytes, false, checkContentType},
	} {
		if f.value == "" {
			if f.required {
				return fail(f.name, "must not be empty")
			}
			continue
		}
		if reason := checkText(f.value, f.max); reason != "" {
			return fail(f.name, "%s", reason)
		}
		if reason := f.check(f.value); reason != "" {
			return fail(f.name, "%s", reason)
		}
	}
	if e.AggregateVersion < 0 {
		return fail("AggregateVersion", "must be 0 (no version) or at least 1, got %d", e.AggregateVersion)
	}
	switch {
	case e.SchemaVersion == 0:
		e.SchemaVersion = 1
	case e.SchemaVersion < 1 || e.SchemaVersion > math.MaxInt32:
		return fail("SchemaVersion", "must be between 1 and %d, got %d", math.MaxInt32, e.SchemaVersion)
	}
	if e.TraceParent != "" {
		if reason := checkTraceParent(e.TraceParent); reason != "" {
			return fail("TraceParent", "%s", reason)
		}
	}
	if !e.AvailableAt.IsZero() {
		if y := e.AvailableAt.UTC().Year(); y < 1 || y > maxAvailableYear {
			return fail("AvailableAt", "must be between year 1 and year %d, got %s", maxAvailableYear, e.AvailableAt.UTC().Format(time.RFC3339))
		}
	}
	total := 0
	for name, value := range e.Headers {
		field := "Headers[" + name + "]"
		if name == "" || len(name) > maxHeaderNameBytes || strings.IndexFunc(name, notTokenChar) >= 0 {
			return fail(field, "header name must be 1 to %d HTTP token characters (letters, digits and !#$%%&'*+-.^_`|~)", maxHeaderNameBytes)
		}
		if !utf8.ValidString(value) || strings.IndexFunc(value, notHeaderValueChar) >= 0 {
			return fail(field, "header value must be printable UTF-8 without control characters (CR, LF, NUL)")
		}
		total += len(name) + len(value)
	}
	if total > maxHeadersBytes {
		return fail("Headers", "hold %d bytes; at most %d are allowed", total, maxHeadersBytes)
	}
	if e.ContentType == "" {
		e.ContentType = ContentTypeJSON
	}
	if len(e.Payload) > w.maxPayload {
		return fail("Payload", "is %d bytes; the limit is %d (WriterConfig.MaxPayloadBytes)", len(e.Payload), w.maxPayload)
	}
	if len(e.Payload) > 0 && isJSONContentType(e.ContentType) {
		if err := checkJSONB(e.Payload); err != nil {
			return fail("Payload", "content type %s: payload %v", e.ContentType, err)
		}
	}
	if e.ID == uuid.Nil {
		e.ID = NewID()
	}
	return e, nil
}

// checkText returns why s cannot be stored as text, or "".
func checkText(s string, maxBytes int) string {
	switch {
	case len(s) > maxBytes:
		return fmt.Sprintf("is %d bytes; at most %d are allowed", len(s), maxBytes)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte, which PostgreSQL text cannot store"
	}
	return ""
}

// checkName returns why an aggregate or event type is refused, or "": it becomes part of
// topics, subjects and routing keys (by a sink's template) and a header value, so it holds
// no whitespace, no control character and neither of the wildcards * and >.
func checkName(s string) string {
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '*' || r == '>' }); i >= 0 {
		return fmt.Sprintf("must not contain whitespace, control characters or the wildcards * and > (it becomes part of topics, subjects and routing keys): %q at byte %d", []rune(s[i:])[0], i)
	}
	return ""
}

// checkNoControls returns why a value that becomes a header or a message key is
// refused, or "": it holds no control character (CR, LF, tab, …).
func checkNoControls(s string) string {
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return fmt.Sprintf("must not contain control characters (it becomes a header and a message key): %q at byte %d", []rune(s[i:])[0], i)
	}
	return ""
}

// checkTopic returns why a topic override is refused, or "".
func checkTopic(s string) string {
	if !topicPattern.MatchString(s) {
		return "must be ASCII letters, digits, '_' and '-', in tokens separated by single dots (what every broker takes as a topic, subject or routing key as it is)"
	}
	return ""
}

// checkContentType returns why a content type is refused, or "": a media type as HTTP
// writes it (type/subtype, optional parameters), printable ASCII.
func checkContentType(s string) string {
	if i := strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
		return fmt.Sprintf("must be printable ASCII (it becomes a header): %q at byte %d", []rune(s[i:])[0], i)
	}
	mt, _, err := mime.ParseMediaType(s)
	if err != nil || !strings.Contains(mt, "/") {
		return "is not a media type (type/subtype, e.g. application/json or application/vnd.acme+json; charset=utf-8)"
	}
	return ""
}

// checkTraceParent returns why a traceparent is refused, or "".
func checkTraceParent(s string) string {
	const want = "is not a W3C traceparent (version-traceid-parentid-flags in lowercase hex, e.g. 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01)"
	switch {
	case !traceParentPattern.MatchString(s):
		return want
	case s[:2] == "ff":
		return want + ": version ff is invalid"
	case s[:2] == "00" && len(s) != 55:
		return want + ": version 00 has no further fields"
	case s[3:35] == strings.Repeat("0", 32) || s[36:52] == strings.Repeat("0", 16):
		return want + ": an all-zero trace id or parent id is invalid"
	}
	return ""
}

func notTokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		return false
	}
	return true
}

func notHeaderValueChar(r rune) bool {
	return r != '\t' && unicode.IsControl(r)
}
