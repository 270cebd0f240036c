package outbox

import (
	"encoding/base64"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendRow appends e (validated, defaults filled) as the JSON object the enqueue
// statement reads with json_to_recordset: ord, id, aggregate_type, aggregate_id,
// aggregate_version, event_type, schema_version, topic, headers, content_type, payload
// (raw JSON) or payload_b64, trace_parent, available_at. Absent fields are null.
func appendRow(b []byte, ord int, e *Event) []byte {
	b = append(b, `{"ord":`...)
	b = strconv.AppendInt(b, int64(ord), 10)
	b = append(b, `,"id":"`...)
	b = append(b, e.ID.String()...)
	b = append(b, `","aggregate_type":`...)
	b = appendJSONString(b, e.AggregateType)
	b = append(b, `,"aggregate_id":`...)
	b = appendJSONString(b, e.AggregateID)
	if e.AggregateVersion > 0 {
		b = append(b, `,"aggregate_version":`...)
		b = strconv.AppendInt(b, e.AggregateVersion, 10)
	}
	b = append(b, `,"event_type":`...)
	b = appendJSONString(b, e.EventType)
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(e.SchemaVersion), 10)
	if e.Topic != "" {
		b = append(b, `,"topic":`...)
		b = appendJSONString(b, e.Topic)
	}
	if len(e.Headers) > 0 {
		b = append(b, `,"headers":`...)
		b = appendHeaders(b, e.Headers)
	}
	b = append(b, `,"content_type":`...)
	b = appendJSONString(b, e.ContentType)
	switch {
	case len(e.Payload) == 0:
	case isJSONContentType(e.ContentType):
		b = append(b, `,"payload":`...)
		b = append(b, e.Payload...) // validated JSON
	default:
		b = append(b, `,"payload_b64":"`...)
		b = base64.StdEncoding.AppendEncode(b, e.Payload)
		b = append(b, '"')
	}
	if e.TraceParent != "" {
		b = append(b, `,"trace_parent":`...)
		b = appendJSONString(b, e.TraceParent)
	}
	if !e.AvailableAt.IsZero() {
		b = append(b, `,"available_at":"`...)
		b = e.AvailableAt.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}')
}

// appendJSONString appends s (valid UTF-8, checked by validate) as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendHeaders appends headers as a JSON object of strings.
func appendHeaders(b []byte, headers map[string]string) []byte {
	b = append(b, '{')
	first := true
	for k, v := range headers {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, v)
	}
	return append(b, '}')
}
