// Package redact hides fields of JSON payloads named by a small JSONPath subset, for
// the operator's views of events (the outbox command's dead show and tail, outboxadmin's
// event detail): $.card.number, $.items[*].ssn, $.contacts[0].phone.
package redact

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

// Path is a parsed JSON path: $.card.number, $.items[*].ssn, $.contacts[0].phone.
type Path []pathStep

// String returns the path as ParsePath reads it.
func (p Path) String() string {
	var b strings.Builder
	b.WriteString("$")
	for _, st := range p {
		switch {
		case !st.isIdx:
			b.WriteString("." + st.field)
		case st.index < 0:
			b.WriteString("[*]")
		default:
			b.WriteString("[" + strconv.Itoa(st.index) + "]")
		}
	}
	return b.String()
}

// ParsePath parses the small JSONPath subset redaction takes: $, then .name (letters,
// digits, _ and -), [n] and [*].
func ParsePath(s string) (Path, error) {
	rest, ok := strings.CutPrefix(s, "$")
	if !ok {
		return nil, fmt.Errorf("path %q must start with $", s)
	}
	var p Path
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
		return nil, fmt.Errorf("path %q names the whole payload: do not show payloads instead", s)
	}
	return p, nil
}

// Payload returns payload with the values at paths replaced by "[redacted]". A payload
// that is not JSON is withheld entirely when any path is configured (its fields cannot
// be found, so none can be shown safely).
func Payload(payload []byte, paths []Path) []byte {
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

func redactAt(v any, p Path) any {
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
