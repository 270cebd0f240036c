// Package sinkformat is the message format every broker sink of this repository
// shares: the headers an event carries (the default, Debezium-compatible names or
// CloudEvents binary mode), their decoding back into an [outbox.Message], the routing
// template, and the rules for destination names a broker forbids. docs/message-format.md
// is the contract it implements.
//
// It depends only on the standard library and the root package, so a consumer can
// decode messages with it without the relay's broker clients.
package sinkformat

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

// Format says which header names carry the event's attributes.
type Format string

const (
	// Outbox is the default format: a header named "id" holds the event id (as
	// Debezium's outbox event router writes it), the other attributes travel in
	// "outbox-…" headers.
	Outbox Format = "outbox"
	// CloudEvents is CloudEvents 1.0 binary content mode: the attributes travel in
	// headers with the binding's prefix ("ce_" on Kafka, "ce-" on NATS,
	// "cloudEvents:" on AMQP), the payload is the event data.
	CloudEvents Format = "cloudevents"
)

// Header names of the [Outbox] format.
const (
	HeaderID               = "id"
	HeaderEventType        = "outbox-event-type"
	HeaderAggregateType    = "outbox-aggregate-type"
	HeaderAggregateID      = "outbox-aggregate-id"
	HeaderAggregateVersion = "outbox-aggregate-version"
	HeaderSchemaVersion    = "outbox-schema-version"
	HeaderCreatedAt        = "outbox-created-at"
	// HeaderContentType is the payload's content type in both formats, on every
	// binding (AMQP also sets its content-type property).
	HeaderContentType = "content-type"
	// HeaderTraceParent is the W3C traceparent in both formats.
	HeaderTraceParent = "traceparent"
)

// CloudEvents attribute names, without the binding's prefix. The extension
// attributes carry what CloudEvents has no attribute for.
const (
	CEID               = "id"
	CESource           = "source"
	CESpecVersion      = "specversion"
	CEType             = "type"
	CESubject          = "subject"
	CETime             = "time"
	CEAggregateType    = "aggregatetype"
	CEAggregateVersion = "aggregateversion"
	CESchemaVersion    = "schemaversion"
)

// SpecVersion is the CloudEvents version of the [CloudEvents] format.
const SpecVersion = "1.0"

// Binding is how one broker protocol carries CloudEvents attributes.
type Binding struct {
	// Name names the broker protocol in errors.
	Name string
	// CEPrefix is put before each CloudEvents attribute name.
	CEPrefix string
	// Reserved lists, in lower case, header names the broker itself interprets, and
	// ReservedPrefixes the prefixes of such names: an event's own header may use
	// neither (in any case).
	Reserved, ReservedPrefixes []string
}

// The bindings of the CloudEvents Kafka, NATS and AMQP protocol bindings. NATS
// reserves the "Nats-" headers (Nats-Msg-Id is the dedup key); RabbitMQ routes copies
// of a message by its CC and BCC headers.
var (
	Kafka = Binding{Name: "kafka", CEPrefix: "ce_"}
	NATS  = Binding{Name: "nats", CEPrefix: "ce-", ReservedPrefixes: []string{"nats-"}}
	AMQP  = Binding{Name: "amqp", CEPrefix: "cloudEvents:", Reserved: []string{"cc", "bcc"}}
)

// HTTP is the binding of the CloudEvents HTTP protocol binding, for webhooks: HTTP
// itself interprets the framing, connection and proxy headers, and webhook signing
// owns the "webhook-" headers.
var HTTP = Binding{
	Name: "http", CEPrefix: "ce-",
	Reserved: []string{
		"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
		"upgrade", "expect", "proxy-connection", "proxy-authorization", "proxy-authenticate",
	},
	ReservedPrefixes: []string{"webhook-"},
}

// Redis is the binding of Redis Streams, which have no CloudEvents binding: the
// attributes are entry fields with the "ce_" prefix (as on Kafka), and the field
// "payload" holds the payload.
var Redis = Binding{Name: "redis", CEPrefix: "ce_", Reserved: []string{"payload"}}

// SQS is the binding of Amazon SQS message attributes, which have no CloudEvents
// binding: the attributes use the "ce-" prefix (as on HTTP), and names starting with
// "AWS." or "Amazon." are SQS's own.
var SQS = Binding{Name: "sqs", CEPrefix: "ce-", ReservedPrefixes: []string{"aws.", "amazon."}}

// Header is one message header.
type Header struct {
	Name, Value string
}

// ErrHeader is wrapped by every error for a header that cannot be sent as it is: a
// name that is not an HTTP token or that a format reserves, a value with control
// characters or invalid UTF-8. Sinks mark it [outbox.Permanent]: retrying the same
// event cannot help.
var ErrHeader = errors.New("header cannot be sent")

// DefaultSource is the CloudEvents source of an [Encoder] configured without one.
const DefaultSource = "outbox"

// Encoder turns messages into headers in one format for one binding.
type Encoder struct {
	binding  Binding
	format   Format
	source   string
	reserved []string // lower-case names the event's own headers may not use
	prefixes []string // lower-case prefixes the event's own headers may not use
}

// NewEncoder returns an encoder of format for binding; format "" is [Outbox] and
// source "" is [DefaultSource] (source is used by [CloudEvents] only).
func NewEncoder(binding Binding, format Format, source string) (*Encoder, error) {
	format = cmp.Or(format, Outbox)
	source = cmp.Or(source, DefaultSource)
	if format != Outbox && format != CloudEvents {
		return nil, fmt.Errorf("Format must be %q or %q, got %q", Outbox, CloudEvents, format)
	}
	if err := checkValue(source); err != nil {
		return nil, fmt.Errorf("Source: %w", err)
	}
	e := &Encoder{binding: binding, format: format, source: source}
	// Every name either format writes is reserved in both, so an event's own header
	// can never pose as an attribute, whichever format a consumer expects.
	e.reserved = []string{
		HeaderID, HeaderEventType, HeaderAggregateType, HeaderAggregateID, HeaderAggregateVersion,
		HeaderSchemaVersion, HeaderCreatedAt, HeaderContentType, HeaderTraceParent,
	}
	e.reserved = append(e.reserved, binding.Reserved...)
	e.prefixes = append([]string{"outbox-", strings.ToLower(binding.CEPrefix)}, binding.ReservedPrefixes...)
	return e, nil
}

// Format returns the encoder's format.
func (e *Encoder) Format() Format { return e.format }

// Headers returns m's headers: the format's attributes first, then the event's own
// headers sorted by name. It fails with an error wrapping [ErrHeader] when a header
// cannot be sent as it is; it never rewrites one.
func (e *Encoder) Headers(m outbox.Message) ([]Header, error) {
	hs := make([]Header, 0, 10+len(m.Headers))
	add := func(name, value string) { hs = append(hs, Header{name, value}) }
	if e.format == CloudEvents {
		p := e.binding.CEPrefix
		add(p+CESpecVersion, SpecVersion)
		add(p+CEID, m.ID.String())
		add(p+CESource, e.source)
		add(p+CEType, m.EventType)
		add(p+CESubject, m.AggregateID)
		add(p+CEAggregateType, m.AggregateType)
		if m.AggregateVersion != 0 {
			add(p+CEAggregateVersion, strconv.FormatInt(m.AggregateVersion, 10))
		}
		add(p+CESchemaVersion, strconv.Itoa(m.SchemaVersion))
		if !m.CreatedAt.IsZero() {
			add(p+CETime, m.CreatedAt.UTC().Format(time.RFC3339Nano))
		}
	} else {
		add(HeaderID, m.ID.String())
		add(HeaderEventType, m.EventType)
		add(HeaderAggregateType, m.AggregateType)
		add(HeaderAggregateID, m.AggregateID)
		if m.AggregateVersion != 0 {
			add(HeaderAggregateVersion, strconv.FormatInt(m.AggregateVersion, 10))
		}
		add(HeaderSchemaVersion, strconv.Itoa(m.SchemaVersion))
		if !m.CreatedAt.IsZero() {
			add(HeaderCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano))
		}
	}
	if m.ContentType != "" {
		add(HeaderContentType, m.ContentType)
	}
	if m.TraceParent != "" {
		add(HeaderTraceParent, m.TraceParent)
	}
	for i := range hs {
		if err := checkValue(hs[i].Value); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrHeader, hs[i].Name, err)
		}
	}
	own := len(hs)
	for name, value := range m.Headers {
		if err := e.checkOwn(name, value); err != nil {
			return nil, err
		}
		add(name, value)
	}
	slices.SortFunc(hs[own:], func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	return hs, nil
}

// checkOwn checks one of the event's own headers.
func (e *Encoder) checkOwn(name, value string) error {
	if name == "" || strings.IndexFunc(name, notToken) >= 0 {
		return fmt.Errorf("%w: name %q is not an HTTP token", ErrHeader, name)
	}
	lower := strings.ToLower(name)
	if slices.Contains(e.reserved, lower) || slices.ContainsFunc(e.prefixes, func(p string) bool { return strings.HasPrefix(lower, p) }) {
		return fmt.Errorf("%w: name %q is reserved for the event's attributes", ErrHeader, name)
	}
	if err := checkValue(value); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrHeader, name, err)
	}
	return nil
}

// checkValue refuses what could end a header line or break a text protocol.
func checkValue(v string) error {
	ascii := true
	for i := range len(v) {
		if c := v[i]; c >= utf8.RuneSelf {
			ascii = false
			break
		} else if c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Errorf("value holds control character %U at byte %d", rune(c), i)
		}
	}
	if ascii {
		return nil
	}
	if !utf8.ValidString(v) {
		return errors.New("value is not valid UTF-8")
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("value holds control character %U at byte %d", []rune(v[i:])[0], i)
	}
	return nil
}

func notToken(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// Decode reads a message back from the headers an [Encoder] of binding wrote, in
// either format (the one whose id header is present), and its payload. Fields that
// the format does not carry (Seq, Topic, Attempt) are left zero. Headers outside the
// format's names become the message's Headers.
func Decode(binding Binding, headers []Header, payload []byte) (outbox.Message, error) {
	m := outbox.Message{Payload: payload}
	attrs := make(map[string]string, len(headers))
	for _, h := range headers {
		attrs[h.Name] = h.Value
	}
	p := binding.CEPrefix
	names := map[string]*string{HeaderContentType: &m.ContentType, HeaderTraceParent: &m.TraceParent}
	var id, version, schema, created string
	if _, ce := attrs[p+CEID]; ce {
		if v := attrs[p+CESpecVersion]; v != SpecVersion {
			return m, fmt.Errorf("decode: %s%s is %q, want %q", p, CESpecVersion, v, SpecVersion)
		}
		for name, dst := range map[string]*string{
			CEID: &id, CEType: &m.EventType, CESubject: &m.AggregateID, CEAggregateType: &m.AggregateType,
			CEAggregateVersion: &version, CESchemaVersion: &schema, CETime: &created, CESource: new(string), CESpecVersion: new(string),
		} {
			names[p+name] = dst
		}
	} else {
		for name, dst := range map[string]*string{
			HeaderID: &id, HeaderEventType: &m.EventType, HeaderAggregateType: &m.AggregateType, HeaderAggregateID: &m.AggregateID,
			HeaderAggregateVersion: &version, HeaderSchemaVersion: &schema, HeaderCreatedAt: &created,
		} {
			names[name] = dst
		}
	}
	for _, h := range headers {
		if dst, ok := names[h.Name]; ok {
			*dst = h.Value
			continue
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string)
		}
		m.Headers[h.Name] = h.Value
	}
	var err error
	if m.ID, err = uuid.Parse(id); err != nil {
		return m, fmt.Errorf("decode: event id %q: %w", id, err)
	}
	if version != "" {
		if m.AggregateVersion, err = strconv.ParseInt(version, 10, 64); err != nil {
			return m, fmt.Errorf("decode: aggregate version: %w", err)
		}
	}
	if m.SchemaVersion, err = strconv.Atoi(schema); err != nil {
		return m, fmt.Errorf("decode: schema version: %w", err)
	}
	if created != "" {
		if m.CreatedAt, err = time.Parse(time.RFC3339Nano, created); err != nil {
			return m, fmt.Errorf("decode: created at: %w", err)
		}
	}
	return m, nil
}
