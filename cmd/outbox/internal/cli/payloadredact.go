package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// redactedValue replaces a redacted payload field.
const redactedValue = "[redacted]"

// pathStep is one step of a payload path: a field name, an array index, or every
// element ([*]).
type pathStep struct {
	field string
	index int // -1: every element; with field == "" only
	isIdx bool
}

// payloadPath is a parsed JSON path of redact.paths: $.card.number, $.items[*].ssn,
// $.contacts[0].phone.
type payloadPath []pathStep

// parsePayloadPath parses the small JSONPath subset redact.paths takes: $, then .name
// (letters, digits, _ and -), [n] and [*].
func parsePayloadPath(s string) (payloadPath, error) {
	rest, ok := strings.CutPrefix(s, "$")
	if !ok {
		return nil, fmt.Errorf("path %q must start with $", s)
	}
	var p payloadPath
	for rest != "" {
		switch rest[0] {
		case '.':
			end := 1
			for end < len(rest) && rest[end] != '.' && rest[end] != '[' {
				end++
			}
			name := rest[1:end]
			if name == "" {
				return nil, fmt.Errorf("path %q: empty field name", s)
			}
			p, rest = append(p, pathStep{field: name}), rest[end:]
		case '[':
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, fmt.Errorf("path %q: unclosed [", s)
			}
			in := rest[1:end]
			step := pathStep{isIdx: true, index: -1}
			if in != "*" {
				n, err := strconv.Atoi(in)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("path %q: [%s] must be an index or *", s, in)
				}
				step.index = n
			}
			p, rest = append(p, step), rest[end+1:]
		default:
			return nil, fmt.Errorf("path %q: unexpected %q", s, rest[:1])
		}
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("path %q names the whole payload: leave --payload off instead", s)
	}
	return p, nil
}

// redactPayload returns payload with the values at paths replaced by "[redacted]". A
// payload that is not JSON is withheld entirely when any path is configured (its
// fields cannot be found, so none can be shown safely).
func redactPayload(payload []byte, paths []payloadPath) []byte {
	if len(paths) == 0 || len(payload) == 0 {
		return payload
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber() // numbers as written
	var v any
	if err := dec.Decode(&v); err != nil {
		return []byte(`"[redacted: not JSON]"`)
	}
	for _, p := range paths {
		v = redactAt(v, p)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return []byte(`"[redacted]"`)
	}
	return out
}

func redactAt(v any, p payloadPath) any {
	if len(p) == 0 {
		return redactedValue
	}
	step, rest := p[0], p[1:]
	switch x := v.(type) {
	case map[string]any:
		if !step.isIdx {
			if child, ok := x[step.field]; ok {
				x[step.field] = redactAt(child, rest)
			}
		}
	case []any:
		if step.isIdx {
			for i := range x {
				if step.index < 0 || step.index == i {
					x[i] = redactAt(x[i], rest)
				}
			}
		}
	}
	return v
}
