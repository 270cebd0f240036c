package outbox

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits on text fields keep every row within what PostgreSQL's btree indexes accept
// (an index entry must fit in a third of a page), so a long value is refused here
// rather than failing inside the caller's transaction.
const (
	maxAggregateTypeBytes = 255
	maxAggregateIDBytes   = 1024
	maxEventTypeBytes     = 255
	maxTopicBytes         = 1024
	maxContentTypeBytes   = 255
	maxHeaderNameBytes    = 255
	maxHeadersBytes       = 64 << 10
)

// traceParentPattern is the W3C Trace Context traceparent header, version 00 or later.
var traceParentPattern = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$`)

// isJSONContentType reports whether payloads of this content type are stored as jsonb.
func isJSONContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == ContentTypeJSON || strings.HasSuffix(mt, "+json")
}

// validate checks e (the index-th event of a call) and returns it with defaults filled.
func (w *Writer) validate(index int, e Event) (Event, error) {
	fail := func(field, format string, args ...any) (Event, error) {
		return Event{}, &ValidationError{Index: index, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	for _, f := range []struct {
		name, value string
		max         int
		required    bool
	}{
		{"AggregateType", e.AggregateType, maxAggregateTypeBytes, true},
		{"AggregateID", e.AggregateID, maxAggregateIDBytes, true},
		{"EventType", e.EventType, maxEventTypeBytes, true},
		{"Topic", e.Topic, maxTopicBytes, false},
		{"ContentType", e.ContentType, maxContentTypeBytes, false},
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
	}
	if e.AggregateVersion < 0 {
		return fail("AggregateVersion", "must be 0 (no version) or at least 1, got %d", e.AggregateVersion)
	}
	switch {
	case e.SchemaVersion == 0:
		e.SchemaVersion = 1
	case e.SchemaVersion < 1:
		return fail("SchemaVersion", "must be at least 1, got %d", e.SchemaVersion)
	}
	if e.TraceParent != "" && !traceParentPattern.MatchString(e.TraceParent) {
		return fail("TraceParent", "is not a W3C traceparent (version-traceid-spanid-flags in lowercase hex)")
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
