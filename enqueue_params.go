package outbox

import "time"

// enqueueParams is the parameters of one enqueue statement, encoded from validated
// events (defaults filled) by a [Tx] adapter: *oneParams, *arraysParams or *jsonParams.
// The type says which statement runs (enqueueStatements.bind). Each struct is bound by
// its sql tags to the @names of its .sql file in internal/sqlq/queries.
type enqueueParams interface{ enqueueParams() }

// oneParams are the parameters of enqueue_one.sql: a single event as one scalar per
// column, for both drivers. Nil pointers are NULLs (a nil pointer passes as NULL through
// database/sql's default converter too, so any driver takes them).
type oneParams struct {
	ID               any        `sql:"id"` // [16]byte through pgx (encoded directly), the text form through database/sql
	AggregateType    string     `sql:"aggregate_type"`
	AggregateID      string     `sql:"aggregate_id"`
	AggregateVersion *int64     `sql:"aggregate_version"`
	EventType        string     `sql:"event_type"`
	SchemaVersion    int64      `sql:"schema_version"`
	Topic            *string    `sql:"topic"`
	Headers          *string    `sql:"headers"` // a JSON object
	ContentType      string     `sql:"content_type"`
	Payload          *string    `sql:"payload"`       // JSON content types: the payload as written
	PayloadBytes     *[]byte    `sql:"payload_bytes"` // other content types
	TraceParent      *string    `sql:"trace_parent"`
	AvailableAt      *time.Time `sql:"available_at"`
	Lock             bool       `sql:"lock"`
}

// arraysParams are the parameters of enqueue_arrays.sql: several events column by
// column, as typed arrays in pgx's binary format (pgx only). Nil pointers and slices
// are NULLs.
type arraysParams struct {
	ID               [][16]byte   `sql:"id"`
	AggregateType    []string     `sql:"aggregate_type"`
	AggregateID      []string     `sql:"aggregate_id"`
	AggregateVersion []*int64     `sql:"aggregate_version"`
	EventType        []string     `sql:"event_type"`
	SchemaVersion    []int32      `sql:"schema_version"`
	Topic            []*string    `sql:"topic"`
	Headers          []*string    `sql:"headers"`
	ContentType      []string     `sql:"content_type"`
	Payload          []*string    `sql:"payload"`
	PayloadBytes     [][]byte     `sql:"payload_bytes"`
	TraceParent      []*string    `sql:"trace_parent"`
	AvailableAt      []*time.Time `sql:"available_at"`
	Lock             bool         `sql:"lock"`
}

// jsonParams are the parameters of enqueue.sql: several events as one JSON array of
// rows (see appendRow), a text parameter any database/sql driver can pass.
type jsonParams struct {
	Rows string `sql:"rows"`
	Lock bool   `sql:"lock"`
}

// conflictsParams are the parameters of enqueue_conflicts.sql.
type conflictsParams struct {
	IDs string `sql:"ids"` // a JSON array of id strings
}

func (*oneParams) enqueueParams()    {}
func (*arraysParams) enqueueParams() {}
func (*jsonParams) enqueueParams()   {}

// newOneParams encodes e with id, its id in the driver's preferred form.
func newOneParams(e *Event, id any, lock bool) *oneParams {
	c := optionalColumns(e)
	p := &oneParams{
		ID: id, AggregateType: e.AggregateType, AggregateID: e.AggregateID, AggregateVersion: c.aggregateVersion,
		EventType: e.EventType, SchemaVersion: int64(e.SchemaVersion), Topic: c.topic, Headers: c.headers,
		ContentType: e.ContentType, Payload: c.payload, TraceParent: c.traceParent, AvailableAt: c.availableAt,
		Lock: lock,
	}
	if b := c.payloadBytes; b != nil {
		p.PayloadBytes = &b
	}
	return p
}

// columns are an event's optional columns as the statements take them: nil is NULL.
type columns struct {
	aggregateVersion                     *int64
	topic, headers, payload, traceParent *string
	payloadBytes                         []byte
	availableAt                          *time.Time
}

// optionalColumns returns e's optional columns: a JSON payload as text (kept as written),
// any other as bytes; headers as a JSON object.
func optionalColumns(e *Event) columns {
	c := columns{topic: nonEmpty(e.Topic), traceParent: nonEmpty(e.TraceParent)}
	if e.AggregateVersion > 0 {
		c.aggregateVersion = &e.AggregateVersion
	}
	if len(e.Headers) > 0 {
		h := string(appendHeaders(nil, e.Headers))
		c.headers = &h
	}
	switch {
	case len(e.Payload) == 0:
	case isJSONContentType(e.ContentType):
		s := string(e.Payload)
		c.payload = &s
	default:
		c.payloadBytes = e.Payload
	}
	if !e.AvailableAt.IsZero() {
		c.availableAt = &e.AvailableAt
	}
	return c
}

// newArraysParams encodes events column by column.
func newArraysParams(events []Event, lock bool) *arraysParams {
	n := len(events)
	a := &arraysParams{
		ID: make([][16]byte, n), AggregateType: make([]string, n), AggregateID: make([]string, n),
		EventType: make([]string, n), ContentType: make([]string, n), AggregateVersion: make([]*int64, n),
		SchemaVersion: make([]int32, n), Topic: make([]*string, n), Headers: make([]*string, n),
		Payload: make([]*string, n), TraceParent: make([]*string, n), PayloadBytes: make([][]byte, n),
		AvailableAt: make([]*time.Time, n), Lock: lock,
	}
	for i := range events {
		e := &events[i]
		c := optionalColumns(e)
		a.ID[i], a.AggregateType[i], a.AggregateID[i] = e.ID, e.AggregateType, e.AggregateID
		a.EventType[i], a.ContentType[i], a.SchemaVersion[i] = e.EventType, e.ContentType, int32(e.SchemaVersion) //nolint:gosec // validated
		a.AggregateVersion[i], a.Topic[i], a.Headers[i], a.TraceParent[i] = c.aggregateVersion, c.topic, c.headers, c.traceParent
		a.Payload[i], a.PayloadBytes[i], a.AvailableAt[i] = c.payload, c.payloadBytes, c.availableAt
	}
	return a
}

// newJSONParams encodes events as one JSON array of rows.
func newJSONParams(events []Event, lock bool) *jsonParams {
	buf := make([]byte, 0, 256*len(events))
	buf = append(buf, '[')
	for i := range events {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendRow(buf, i, &events[i])
	}
	buf = append(buf, ']')
	return &jsonParams{Rows: string(buf), Lock: lock}
}

// nonEmpty returns a pointer to a copy of s, or nil for "" (allocating only then:
// returning &s would move s to the heap on every call).
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	p := new(string)
	*p = s
	return p
}
