package inbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

// validateMessage checks what the database would refuse or Process needs: an id, the
// aggregate of a versioned event, and text columns without NUL bytes or invalid UTF-8.
func validateMessage(m *outbox.Message) error {
	bad := func(field, format string, a ...any) error {
		return &MessageError{Field: field, Reason: fmt.Sprintf(format, a...)}
	}
	if m.ID == uuid.Nil {
		return bad("ID", "is zero; every event has an id (the dedup key)")
	}
	if m.AggregateVersion < 0 {
		return bad("AggregateVersion", "is %d; it is 0 (no version) or at least 1", m.AggregateVersion)
	}
	if m.EventType == "" {
		return bad("EventType", "is empty")
	}
	if m.AggregateVersion > 0 && (m.AggregateType == "" || m.AggregateID == "") {
		return bad("AggregateType", "a versioned event needs its aggregate (AggregateType and AggregateID)")
	}
	for _, f := range [...]struct{ name, value string }{
		{"AggregateType", m.AggregateType},
		{"AggregateID", m.AggregateID},
		{"EventType", m.EventType},
		{"Topic", m.Topic},
		{"ContentType", m.ContentType},
		{"TraceParent", m.TraceParent},
	} {
		if err := checkText(f.value); err != "" {
			return bad(f.name, "%s", err)
		}
	}
	for k, v := range m.Headers {
		if err := checkText(k); err != "" {
			return bad("Headers", "a name %s", err)
		}
		if err := checkText(v); err != "" {
			return bad("Headers["+k+"]", "%s", err)
		}
	}
	return nil
}

func checkText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "holds a NUL byte, which PostgreSQL text cannot store"
	}
	return ""
}

// headersJSON returns the headers as JSON text, or nil for none.
func headersJSON(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	return string(b), nil
}

func parseHeaders(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("decode stored headers: %w", err)
	}
	return h, nil
}
