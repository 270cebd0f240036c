package sinkformat

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"text/template/parse"
	"time"
	"unicode"

	"github.com/outboxkit/outbox"
)

// ErrDestination is wrapped by every error for a destination (topic, subject, routing
// key) the broker forbids, or a template that failed on a message. Sinks mark it
// [outbox.Permanent]: the same event routes the same way on every attempt.
var ErrDestination = errors.New("destination refused")

// Router picks each message's destination: the message's Topic when it is set,
// otherwise a text/template executed over the [outbox.Message], such as
// "{{.AggregateType}}.{{.EventType}}". Every destination is checked by the broker's
// rule; one the broker forbids is refused, never rewritten. The template can call
// escape ({{escape .AggregateID}}) to turn a value into one safe name token by the
// reversible rule of [Escape]. A Router is safe for concurrent use.
type Router struct {
	tmpl  *template.Template
	check func(string) error
	// byType caches the destinations of a template that reads nothing but
	// AggregateType and EventType (through escape or not), by those two: most
	// templates, and executing one costs more than the rest of a message's encoding.
	byType *sync.Map
	cached atomic.Int64
}

// maxCached bounds the cache of destinations by type.
const maxCached = 10_000

type typeKey struct{ aggregateType, eventType string }

// NewRouter parses text and checks it at once by executing it over a sample message,
// so a misspelt field fails here, not on the first event. check is the broker's rule
// for a destination ([KafkaTopic], [NATSSubject], [AMQPRoutingKey]); nil accepts any
// non-empty destination.
func NewRouter(text string, check func(string) error) (*Router, error) {
	tmpl, err := template.New("route").Funcs(template.FuncMap{"escape": Escape}).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parse routing template: %w", err)
	}
	probe, err := tmpl.Clone()
	if err != nil {
		return nil, fmt.Errorf("check routing template: %w", err)
	}
	// A header a template names may be missing on the sample: only field names and
	// syntax are checked here.
	sample := outbox.Message{
		AggregateType: "sample", AggregateID: "sample-1", AggregateVersion: 1, EventType: "sample.checked",
		SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, CreatedAt: time.Unix(0, 0).UTC(), Attempt: 1,
	}
	if err := probe.Option("missingkey=zero").Execute(&strings.Builder{}, &sample); err != nil {
		return nil, fmt.Errorf("check routing template %q: %w", text, err)
	}
	if check == nil {
		check = func(string) error { return nil }
	}
	r := &Router{tmpl: tmpl, check: check}
	if readsTypesOnly(tmpl.Root) {
		r.byType = &sync.Map{}
	}
	return r, nil
}

// readsTypesOnly reports whether the template under n reads no field but
// AggregateType and EventType and calls no function but escape.
func readsTypesOnly(n parse.Node) bool {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return true
		}
		for _, c := range n.Nodes {
			if !readsTypesOnly(c) {
				return false
			}
		}
		return true
	case *parse.TextNode:
		return true
	case *parse.ActionNode:
		return n.Pipe != nil && len(n.Pipe.Decl) == 0 && readsTypesOnly(n.Pipe)
	case *parse.PipeNode:
		for _, c := range n.Cmds {
			if !readsTypesOnly(c) {
				return false
			}
		}
		return true
	case *parse.CommandNode:
		for _, a := range n.Args {
			if !readsTypesOnly(a) {
				return false
			}
		}
		return true
	case *parse.FieldNode:
		return len(n.Ident) == 1 && (n.Ident[0] == "AggregateType" || n.Ident[0] == "EventType")
	case *parse.IdentifierNode:
		return n.Ident == "escape"
	case *parse.StringNode:
		return true
	}
	return false
}

// Route returns m's destination. Its error wraps [ErrDestination].
func (r *Router) Route(m *outbox.Message) (string, error) {
	if m.Topic == "" {
		return r.Execute(m)
	}
	return r.checked(m.Topic)
}

// Execute returns the template's destination for m, whatever its Topic (which the
// template can read as {{.Topic}}), checked by the broker's rule: for a sink whose
// destinations a Topic cannot name, such as a webhook's URL. Its error wraps
// [ErrDestination].
func (r *Router) Execute(m *outbox.Message) (string, error) {
	if r.byType != nil {
		if d, ok := r.byType.Load(typeKey{m.AggregateType, m.EventType}); ok {
			return d.(string), nil
		}
	}
	var b strings.Builder
	if err := r.tmpl.Execute(&b, m); err != nil {
		return "", fmt.Errorf("%w: routing template: %w", ErrDestination, err)
	}
	dest := b.String()
	if r.byType != nil && dest != "" && r.check(dest) == nil && r.cached.Add(1) <= maxCached {
		r.byType.Store(typeKey{m.AggregateType, m.EventType}, dest)
	}
	return r.checked(dest)
}

// checked checks dest by the broker's rule.
func (r *Router) checked(dest string) (string, error) {
	if dest == "" {
		return "", fmt.Errorf("%w: empty destination", ErrDestination)
	}
	if err := r.check(dest); err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrDestination, dest, err)
	}
	return dest, nil
}

// KafkaTopic checks a Kafka topic name: 1 to 249 bytes of [a-zA-Z0-9._-], and neither
// "." nor "..".
func KafkaTopic(name string) error {
	switch {
	case len(name) == 0 || len(name) > 249:
		return fmt.Errorf("a kafka topic name is 1 to 249 bytes, this one %d", len(name))
	case name == "." || name == "..":
		return errors.New(`a kafka topic name cannot be "." or ".."`)
	}
	for i := range len(name) {
		if c := name[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("a kafka topic name holds only [a-zA-Z0-9._-], this one byte 0x%02x at offset %d", c, i)
		}
	}
	return nil
}

// NATSSubject checks a NATS subject to publish to: tokens separated by ".", none
// empty, none holding the wildcards "*" or ">", whitespace or control characters.
func NATSSubject(name string) error {
	for i, tok := range strings.Split(name, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("nats subject token %d is empty", i+1)
		case strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("nats subject token %q holds a wildcard", tok)
		case strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			return fmt.Errorf("nats subject token %q holds whitespace or a control character", tok)
		}
	}
	return nil
}

// AMQPRoutingKey checks an AMQP routing key: at most 255 bytes (a short string) of
// valid text without control characters.
func AMQPRoutingKey(name string) error {
	if len(name) > 255 {
		return fmt.Errorf("an amqp routing key is at most 255 bytes, this one %d", len(name))
	}
	return checkValue(name)
}

// RedisKey checks a Redis stream key: 1 to 1,024 bytes of valid text without control
// characters. Redis itself takes any bytes; the rule keeps keys readable in logs and
// in last_error, and short enough to hash quickly.
func RedisKey(name string) error {
	if len(name) == 0 || len(name) > 1024 {
		return fmt.Errorf("a redis key is 1 to 1024 bytes here, this one %d", len(name))
	}
	return checkValue(name)
}

// SQSQueue checks an Amazon SQS queue name, or a queue URL (one starting with
// "https://" or "http://"): a name is 1 to 80 bytes of [a-zA-Z0-9_-], with ".fifo" at
// its end (within the 80) for a FIFO queue; a URL is valid text without control
// characters or spaces, its last path segment such a name.
func SQSQueue(name string) error {
	if strings.HasPrefix(name, "https://") || strings.HasPrefix(name, "http://") {
		if err := checkValue(name); err != nil || strings.ContainsAny(name, " \t") {
			return fmt.Errorf("an sqs queue url holds no spaces or control characters: %q", name)
		}
		name = name[strings.LastIndexByte(name, '/')+1:]
	}
	base := strings.TrimSuffix(name, ".fifo")
	if len(base) == 0 || len(name) > 80 {
		return fmt.Errorf("an sqs queue name is 1 to 80 bytes, this one %d", len(name))
	}
	for i := range len(base) {
		if c := base[i]; !isAlnum(c) && c != '_' && c != '-' {
			return fmt.Errorf("an sqs queue name holds only [a-zA-Z0-9_-] (and a .fifo suffix), this one byte 0x%02x at offset %d", c, i)
		}
	}
	return nil
}

// Escape turns s into one name token valid for every broker (a Kafka topic part, a
// NATS subject token, an AMQP routing key word) by a reversible rule: ASCII letters,
// digits and "-" stay; every other byte, "_" and "." included, becomes "_" and its two
// lowercase hex digits. [Unescape] reverses it.
func Escape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	const hex = "0123456789abcdef"
	for i := range len(s) {
		c := s[i]
		if isAlnum(c) || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// Unescape reverses [Escape]. It fails on a string Escape cannot have written.
func Unescape(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isAlnum(c) || c == '-':
			b.WriteByte(c)
		case c == '_' && i+2 < len(s) && isLowerHex(s[i+1]) && isLowerHex(s[i+2]):
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			return "", fmt.Errorf("unescape %q: byte %d (%q) is not what Escape writes", s, i, c)
		}
	}
	return b.String(), nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}
