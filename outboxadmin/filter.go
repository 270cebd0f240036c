package outboxadmin

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Filter selects events: every field set must match; an empty Filter matches every event.
type Filter struct {
	// ID is one event's id.
	ID *uuid.UUID `json:"id,omitempty"`
	// EventType matches events of this type.
	EventType string `json:"event_type,omitempty"`
	// AggregateType matches events of this aggregate type.
	AggregateType string `json:"aggregate_type,omitempty"`
	// AggregateID matches events of this aggregate id.
	AggregateID string `json:"aggregate_id,omitempty"`
	// CreatedFrom matches events created at or after it.
	CreatedFrom *time.Time `json:"created_from,omitempty"`
	// CreatedTo matches events created before it.
	CreatedTo *time.Time `json:"created_to,omitempty"`
}

// empty reports whether f matches every event.
func (f Filter) empty() bool { return f == Filter{} }

// filterParams are admin_filter.sql's parameters, inlined in those of every statement
// that includes it: a Filter's fields under their SQL names (a nil pointer is NULL).
type filterParams struct {
	ID            *uuid.UUID `sql:"id"`
	EventType     string     `sql:"event_type"`
	AggregateType string     `sql:"aggregate_type"`
	AggregateID   string     `sql:"aggregate_id"`
	CreatedFrom   *time.Time `sql:"created_from"`
	CreatedTo     *time.Time `sql:"created_to"`
}

func (f Filter) params() filterParams { return filterParams(f) }

// States an event can be in, as the API names them.
const (
	StatePending   = "pending"
	StateDead      = "dead"
	StatePublished = "published"
	StateDiscarded = "discarded"
)

func validState(s string) bool {
	switch s {
	case "", StatePending, StateDead, StatePublished, StateDiscarded:
		return true
	}
	return false
}

// errBadRequest marks errors the client caused (400).
var errBadRequest = errors.New("bad request")

func badRequest(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, a...))
}

// filterFromQuery reads a Filter from URL query parameters of the same names as its JSON.
func filterFromQuery(q url.Values) (Filter, error) {
	f := Filter{EventType: q.Get("event_type"), AggregateType: q.Get("aggregate_type"), AggregateID: q.Get("aggregate_id")}
	if s := q.Get("id"); s != "" {
		id, err := uuid.Parse(s)
		if err != nil {
			return f, badRequest("id %q is not a UUID", s)
		}
		f.ID = &id
	}
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{"created_from", &f.CreatedFrom}, {"created_to", &f.CreatedTo}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return f, badRequest("%s %q is not an RFC 3339 time", p.name, s)
		}
		*p.dst = &t
	}
	return f, nil
}

// intParam reads a non-negative integer query parameter; def when absent.
func intParam(q url.Values, name string, def int64) (int64, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s %q is not a non-negative integer", name, s)
	}
	return n, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
