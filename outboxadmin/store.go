package outboxadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/redact"
	"github.com/outboxkit/outbox/internal/sqlq"
	"github.com/outboxkit/outbox/relay"
)

// Status is the backlog at a glance.
type Status struct {
	// Pending events: not yet published, not dead.
	Pending int64 `json:"pending"`
	// OldestPendingSeconds is the age of the oldest pending event; 0 without one.
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	// Dead letters: dead events not discarded.
	Dead int64 `json:"dead"`
	// BlockedAggregates is the number of aggregates holding a dead letter.
	BlockedAggregates int64 `json:"blocked_aggregates"`
	// MaxSeq is the highest seq written.
	MaxSeq int64 `json:"max_seq"`
	// PublishedPerSecond and DeadPerSecond are estimated between this sample and the
	// handler's previous one (at least a second before); 0 on the first.
	PublishedPerSecond float64 `json:"published_per_second"`
	// DeadPerSecond: see PublishedPerSecond.
	DeadPerSecond float64 `json:"dead_per_second"`
	// Mode and Partitions are the relays' settings (relay_config); empty and 0 before
	// any relay started.
	Mode string `json:"mode"`
	// Partitions: see Mode.
	Partitions int `json:"partitions"`
	// At is the database's time of the sample.
	At time.Time `json:"at"`
	// Retention describes what the events table holds.
	Retention Retention `json:"retention"`
	// ByType counts per event type (types with pending or dead events).
	ByType []TypeCount `json:"by_type"`
	// ByPartition counts per relay partition, with its lease.
	ByPartition []PartitionCount `json:"by_partition"`
	// Relays are the live relays and the partitions they lease.
	Relays []Relay `json:"relays"`
	// Pauses are the active pauses (relay.Pause), newest first.
	Pauses []relay.Paused `json:"pauses"`
	// History holds the handler's recent samples, oldest first.
	History []Sample `json:"history"`
}

// Retention describes the events table's size and how far back it reaches.
type Retention struct {
	// TableBytes and IndexBytes are the events table's and its indexes' sizes.
	TableBytes int64 `json:"table_bytes"`
	// IndexBytes: see TableBytes.
	IndexBytes int64 `json:"index_bytes"`
	// RowsEstimate and ArchivedEstimate are the planner's estimates (as of the last
	// ANALYZE) of the rows in events and events_archive.
	RowsEstimate int64 `json:"rows_estimate"`
	// ArchivedEstimate: see RowsEstimate.
	ArchivedEstimate int64 `json:"archived_estimate"`
	// OldestRow is when the oldest event still in the table was created.
	OldestRow *time.Time `json:"oldest_row,omitempty"`
}

// TypeCount is one event type's backlog.
type TypeCount struct {
	EventType            string  `json:"event_type"`
	Pending              int64   `json:"pending"`
	Dead                 int64   `json:"dead"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
}

// PartitionCount is one relay partition's backlog and lease.
type PartitionCount struct {
	Partition int    `json:"partition"`
	Pending   int64  `json:"pending"`
	Dead      int64  `json:"dead"`
	Owner     string `json:"owner,omitempty"`
	Epoch     int64  `json:"epoch"`
	// Leased reports an unexpired lease.
	Leased bool `json:"leased"`
	// Expires is when the lease expires (or expired); nil for a partition never leased.
	Expires *time.Time `json:"expires,omitempty"`
}

// Relay is one live relay instance.
type Relay struct {
	Owner      string     `json:"owner"`
	Partitions []int32    `json:"partitions"`
	Started    *time.Time `json:"started,omitempty"`
	Heartbeat  *time.Time `json:"heartbeat,omitempty"`
	// BreakerOpenUntil is set while the relay's breaker is open (it found its sink down
	// and no probe has succeeded since), as of its last heartbeat: until when it waits
	// before its next probe (past while a probe is due or under way); nil while the sink
	// is up.
	BreakerOpenUntil *time.Time `json:"breaker_open_until,omitempty"`
	// Published, Dead and BreakerOpens are the relay's counters since it started, as of
	// its last heartbeat.
	Published    int64 `json:"published"`
	Dead         int64 `json:"dead"`
	BreakerOpens int64 `json:"breaker_opens"`
}

// Sample is one point of the overview's history.
type Sample struct {
	At                   time.Time `json:"at"`
	Pending              int64     `json:"pending"`
	Dead                 int64     `json:"dead"`
	OldestPendingSeconds float64   `json:"oldest_pending_seconds"`
	PublishedPerSecond   float64   `json:"published_per_second"`
}

// Event is one event as the admin lists it.
type Event struct {
	Seq              int64      `json:"seq"`
	ID               uuid.UUID  `json:"id"`
	EventType        string     `json:"event_type"`
	AggregateType    string     `json:"aggregate_type"`
	AggregateID      string     `json:"aggregate_id"`
	AggregateVersion int64      `json:"aggregate_version,omitempty"`
	Partition        int16      `json:"partition"`
	State            string     `json:"state"`
	CreatedAt        time.Time  `json:"created_at"`
	AvailableAt      time.Time  `json:"available_at"`
	Attempts         int32      `json:"attempts"`
	LastError        string     `json:"last_error,omitempty"`
	PublishedAt      *time.Time `json:"published_at,omitempty"`
	DeadAt           *time.Time `json:"dead_at,omitempty"`
	DiscardedAt      *time.Time `json:"discarded_at,omitempty"`
}

func (e *Event) scanDest() []any {
	return []any{
		&e.Seq, &e.ID, &e.EventType, &e.AggregateType, &e.AggregateID, &e.AggregateVersion, &e.Partition,
		&e.State, &e.CreatedAt, &e.AvailableAt, &e.Attempts, &e.LastError, &e.PublishedAt, &e.DeadAt, &e.DiscardedAt,
	}
}

// EventDetail is one event with what the list leaves out, and its audit rows.
type EventDetail struct {
	Event
	SchemaVersion int32  `json:"schema_version"`
	Topic         string `json:"topic,omitempty"`
	ContentType   string `json:"content_type"`
	TraceParent   string `json:"trace_parent,omitempty"`
	// Headers: values are "<redacted>" unless Options.ShowPayloads.
	Headers      map[string]string `json:"headers"`
	PayloadBytes int64             `json:"payload_bytes"`
	// Payload is present only with Options.ShowPayloads.
	Payload *string `json:"payload,omitempty"`
	// Audit lists the replays and discards that named this event, newest first.
	Audit []AuditEntry `json:"audit"`
}

// Blocked is an aggregate held by dead events.
type Blocked struct {
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	FirstDeadSeq  int64     `json:"first_dead_seq"`
	Dead          int64     `json:"dead"`
	FirstDeadID   uuid.UUID `json:"first_dead_id"`
	// Held counts the pending events behind the dead ones.
	Held int64 `json:"held"`
}

// AuditEntry is one row of the replays table.
type AuditEntry struct {
	ID     int64           `json:"id"`
	Action string          `json:"action"`
	Actor  string          `json:"actor"`
	Reason string          `json:"reason"`
	Count  int             `json:"count"`
	Filter json.RawMessage `json:"filter,omitempty"`
	At     time.Time       `json:"at"`
}

// store runs the admin's queries on one schema.
type store struct {
	o      Options
	q      *statements
	redact []redact.Path // Options.RedactPaths, parsed
}

// statements are the admin's SQL, rendered for its schema and bound to their parameter
// structs once, in New; each field names its file in internal/sqlq/queries.
type statements struct {
	status                    sqlq.Statement[statusParams]
	byType, owners            string // no parameters
	byPartition               sqlq.Statement[byPartitionParams]
	eventsDead, eventsPending sqlq.Statement[pageParams]
	eventsAfter               sqlq.Statement[statePageParams]
	countDead                 sqlq.Statement[filterParams]
	event                     sqlq.Statement[eventParams]
	blocked                   sqlq.Statement[blockedParams]
	audit                     sqlq.Statement[auditParams]
	replay, discard           sqlq.Statement[changeParams]
	discardOne                sqlq.Statement[discardOneParams]
}

func newStatements(quoted string) *statements {
	return &statements{
		status:        sqlq.Bind[statusParams]("admin_status", quoted),
		byType:        sqlq.Query("admin_by_type", quoted),
		owners:        sqlq.Query("admin_owners", quoted),
		byPartition:   sqlq.Bind[byPartitionParams]("admin_by_partition", quoted),
		eventsDead:    sqlq.Bind[pageParams]("admin_events_dead", quoted),
		eventsPending: sqlq.Bind[pageParams]("admin_events_pending", quoted),
		eventsAfter:   sqlq.Bind[statePageParams]("admin_events_after", quoted),
		countDead:     sqlq.Bind[filterParams]("admin_count_dead", quoted),
		event:         sqlq.Bind[eventParams]("admin_event", quoted),
		blocked:       sqlq.Bind[blockedParams]("admin_blocked", quoted),
		audit:         sqlq.Bind[auditParams]("admin_audit", quoted),
		replay:        sqlq.Bind[changeParams]("admin_replay", quoted),
		discard:       sqlq.Bind[changeParams]("admin_discard", quoted),
		discardOne:    sqlq.Bind[discardOneParams]("admin_discard_one", quoted),
	}
}

// statusParams are admin_status.sql's.
type statusParams struct {
	After int64 `sql:"after"` // the previous sample's max seq
}

// byPartitionParams are admin_by_partition.sql's.
type byPartitionParams struct {
	DefaultPartitions int `sql:"default_partitions"` // the count before any relay started
}

// status reads the counts; after is the previous sample's max seq.
func (s *store) status(ctx context.Context, after int64) (Status, int64, error) {
	var st Status
	var oldest *time.Duration
	var written int64
	err := s.o.Pool.QueryRow(ctx, s.q.status.SQL, s.q.status.Args(&statusParams{After: after})...).Scan(
		&st.Pending, &oldest, &st.Dead, &st.BlockedAggregates, &st.MaxSeq, &written, &st.Mode, &st.Partitions, &st.At,
		&st.Retention.TableBytes, &st.Retention.IndexBytes, &st.Retention.RowsEstimate, &st.Retention.ArchivedEstimate, &st.Retention.OldestRow)
	if err != nil {
		return st, 0, fmt.Errorf("read status: %w", err)
	}
	if oldest != nil {
		st.OldestPendingSeconds = oldest.Seconds()
	}
	rows, err := s.o.Pool.Query(ctx, s.q.byType)
	if err != nil {
		return st, 0, fmt.Errorf("read counts by type: %w", err)
	}
	var tc TypeCount
	var age *time.Duration
	st.ByType = []TypeCount{}
	if _, err := pgx.ForEachRow(rows, []any{&tc.EventType, &tc.Pending, &tc.Dead, &age}, func() error {
		tc.OldestPendingSeconds = 0
		if age != nil {
			tc.OldestPendingSeconds = age.Seconds()
		}
		st.ByType = append(st.ByType, tc)
		return nil
	}); err != nil {
		return st, 0, fmt.Errorf("read counts by type: %w", err)
	}
	bp := byPartitionParams{DefaultPartitions: relay.DefaultPartitions}
	rows, err = s.o.Pool.Query(ctx, s.q.byPartition.SQL, s.q.byPartition.Args(&bp)...)
	if err != nil {
		return st, 0, fmt.Errorf("read counts by partition: %w", err)
	}
	var pc PartitionCount
	var leased *bool
	st.ByPartition = []PartitionCount{}
	if _, err := pgx.ForEachRow(rows, []any{&pc.Partition, &pc.Pending, &pc.Dead, &pc.Owner, &pc.Epoch, &leased, &pc.Expires}, func() error {
		pc.Leased = leased != nil && *leased
		if !pc.Leased {
			pc.Owner = ""
		}
		st.ByPartition = append(st.ByPartition, pc)
		return nil
	}); err != nil {
		return st, 0, fmt.Errorf("read counts by partition: %w", err)
	}
	rows, err = s.o.Pool.Query(ctx, s.q.owners)
	if err != nil {
		return st, 0, fmt.Errorf("read relays: %w", err)
	}
	var r Relay
	st.Relays = []Relay{}
	if _, err := pgx.ForEachRow(rows, []any{&r.Owner, &r.Partitions, &r.Started, &r.Heartbeat, &r.BreakerOpenUntil, &r.Published, &r.Dead, &r.BreakerOpens}, func() error {
		st.Relays = append(st.Relays, r)
		return nil
	}); err != nil {
		return st, 0, fmt.Errorf("read relays: %w", err)
	}
	if st.Pauses, err = relay.ListPauses(ctx, s.o.Pool, s.o.Schema, false, 0); err != nil {
		return st, 0, fmt.Errorf("read pauses: %w", err)
	}
	return st, written, nil
}

// pageParams are admin_events_dead.sql's and admin_events_pending.sql's: one page of
// the events matching the filter, after seq After.
type pageParams struct {
	Filter filterParams `sql:",inline"`
	After  int64        `sql:"after"`
	Limit  int          `sql:"limit"`
}

// statePageParams are admin_events_after.sql's: a page of the events in State too.
type statePageParams struct {
	Page  pageParams `sql:",inline"`
	State string     `sql:"state"`
}

// events lists one page of events in seq order after seq after.
func (s *store) events(ctx context.Context, f Filter, state string, after int64, limit int) ([]Event, error) {
	page := pageParams{Filter: f.params(), After: after, Limit: limit}
	var rows pgx.Rows
	var err error
	switch state {
	case StateDead:
		rows, err = s.o.Pool.Query(ctx, s.q.eventsDead.SQL, s.q.eventsDead.Args(&page)...)
	case StatePending:
		rows, err = s.o.Pool.Query(ctx, s.q.eventsPending.SQL, s.q.eventsPending.Args(&page)...)
	default:
		p := statePageParams{Page: page, State: state}
		rows, err = s.o.Pool.Query(ctx, s.q.eventsAfter.SQL, s.q.eventsAfter.Args(&p)...)
	}
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out := []Event{}
	var e Event
	if _, err := pgx.ForEachRow(rows, e.scanDest(), func() error {
		out = append(out, e)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// countDead counts the dead letters matching f.
func (s *store) countDead(ctx context.Context, f Filter) (int64, error) {
	var n int64
	p := f.params()
	if err := s.o.Pool.QueryRow(ctx, s.q.countDead.SQL, s.q.countDead.Args(&p)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	return n, nil
}

// errNotFound marks a missing event (404).
var errNotFound = errors.New("not found")

// eventParams are admin_event.sql's.
type eventParams struct {
	ID           uuid.UUID `sql:"id"`
	ShowPayloads bool      `sql:"show_payloads"`
}

// event reads one event with its audit rows.
func (s *store) event(ctx context.Context, id uuid.UUID) (EventDetail, error) {
	var d EventDetail
	var headers string
	var payload []byte
	dest := append(d.scanDest(), &d.SchemaVersion, &d.Topic, &d.ContentType, &d.TraceParent, &headers, &d.PayloadBytes, &payload)
	p := eventParams{ID: id, ShowPayloads: s.o.ShowPayloads}
	err := s.o.Pool.QueryRow(ctx, s.q.event.SQL, s.q.event.Args(&p)...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("event %s: %w", id, errNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("read event %s: %w", id, err)
	}
	if err := json.Unmarshal([]byte(headers), &d.Headers); err != nil {
		return d, fmt.Errorf("read event %s headers: %w", id, err)
	}
	if payload != nil {
		p := string(redact.Payload(payload, s.redact))
		d.Payload = &p
	}
	if d.Audit, err = s.audit(ctx, nil, 100, &id); err != nil {
		return d, err
	}
	return d, nil
}

// blockedParams are admin_blocked.sql's.
type blockedParams struct {
	After int64 `sql:"after"` // the previous page's last first dead seq
	Limit int   `sql:"limit"`
}

// blocked lists aggregates held by dead events after first dead seq after.
func (s *store) blocked(ctx context.Context, after int64, limit int) ([]Blocked, error) {
	rows, err := s.o.Pool.Query(ctx, s.q.blocked.SQL, s.q.blocked.Args(&blockedParams{After: after, Limit: limit})...)
	if err != nil {
		return nil, fmt.Errorf("list blocked aggregates: %w", err)
	}
	out := []Blocked{}
	var b Blocked
	if _, err := pgx.ForEachRow(rows, []any{&b.AggregateType, &b.AggregateID, &b.FirstDeadSeq, &b.Dead, &b.FirstDeadID, &b.Held}, func() error {
		out = append(out, b)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list blocked aggregates: %w", err)
	}
	return out, nil
}

// auditParams are admin_audit.sql's (a nil pointer is NULL).
type auditParams struct {
	Before *int64     `sql:"before"`
	Limit  int        `sql:"limit"`
	Event  *uuid.UUID `sql:"event"`
}

// audit lists audit rows before id before (nil: from the newest), optionally only
// those naming event.
func (s *store) audit(ctx context.Context, before *int64, limit int, event *uuid.UUID) ([]AuditEntry, error) {
	p := auditParams{Before: before, Limit: limit, Event: event}
	rows, err := s.o.Pool.Query(ctx, s.q.audit.SQL, s.q.audit.Args(&p)...)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	out := []AuditEntry{}
	var a AuditEntry
	var filter string
	if _, err := pgx.ForEachRow(rows, []any{&a.ID, &a.Action, &a.Actor, &a.Reason, &a.Count, &filter, &a.At}, func() error {
		a.Filter = nil
		if filter != "" {
			a.Filter = json.RawMessage(filter)
		}
		out = append(out, a)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return out, nil
}

// Action names a state change.
type Action string

// The actions.
const (
	ActionReplay  Action = "replay"
	ActionDiscard Action = "discard"
)

// change is one replay or discard request, validated.
type change struct {
	action  Action
	filter  Filter
	actor   string
	reason  string
	expect  *int64
	dryRun  bool
	pending bool // discard one event by id, pending too (admin_discard_one)
}

// Result reports what a replay or discard did (or, dry run, would do).
type Result struct {
	Action Action `json:"action"`
	// Affected is the exact number of events changed (or that would be).
	Affected int64 `json:"affected"`
	// AuditID is the replays row written; 0 when nothing changed or on a dry run.
	AuditID int64 `json:"audit_id,omitempty"`
	// DryRun reports that nothing was changed.
	DryRun bool   `json:"dry_run,omitempty"`
	Filter Filter `json:"filter"`
}

// auditedBy is who changed events and why, as a change's statement writes it into its
// audit row (replays).
type auditedBy struct {
	Actor      string `sql:"actor"`
	Reason     string `sql:"reason"`
	FilterJSON string `sql:"filter_json"` // the filter as the operator gave it
}

// changeParams are admin_replay.sql's and admin_discard.sql's.
type changeParams struct {
	Filter filterParams `sql:",inline"`
	By     auditedBy    `sql:",inline"`
}

// discardOneParams are admin_discard_one.sql's.
type discardOneParams struct {
	ID uuid.UUID `sql:"id"`
	By auditedBy `sql:",inline"`
}

// errConflict marks a change refused because of the data's state (409).
var errConflict = errors.New("conflict")

// apply runs one set-based replay or discard in a transaction: the statement changes
// every matching event and writes its audit row; the transaction is rolled back on a
// dry run, when the count is over MaxBulk, or when it differs from what the operator
// confirmed (expect).
func (s *store) apply(ctx context.Context, c change) (Result, error) {
	res := Result{Action: c.action, Filter: c.filter, DryRun: c.dryRun}
	filterJSON, err := json.Marshal(c.filter)
	if err != nil {
		return res, fmt.Errorf("%s: encode filter: %w", c.action, err)
	}
	by := auditedBy{Actor: c.actor, Reason: c.reason, FilterJSON: string(filterJSON)}
	p := changeParams{Filter: c.filter.params(), By: by}
	query, args := s.q.replay.SQL, s.q.replay.Args(&p)
	switch {
	case c.action == ActionDiscard && c.pending:
		if c.filter.ID == nil || c.filter != (Filter{ID: c.filter.ID}) {
			return res, errors.New("discard: a pending event is discarded by id alone")
		}
		one := discardOneParams{ID: *c.filter.ID, By: by}
		query, args = s.q.discardOne.SQL, s.q.discardOne.Args(&one)
	case c.action == ActionDiscard:
		query, args = s.q.discard.SQL, s.q.discard.Args(&p)
	}
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var auditID *int64
		if err := tx.QueryRow(ctx, query, args...).Scan(&res.Affected, &auditID); err != nil {
			return fmt.Errorf("%s: %w", c.action, err)
		}
		switch {
		case res.Affected > int64(s.o.MaxBulk):
			return fmt.Errorf("%w: the filter matches %d events, more than MaxBulk (%d): narrow it; nothing changed", errConflict, res.Affected, s.o.MaxBulk)
		case c.expect != nil && *c.expect != res.Affected:
			return fmt.Errorf("%w: the filter matches %d events now, not the %d confirmed; nothing changed", errConflict, res.Affected, *c.expect)
		case c.dryRun:
			return errDryRun
		}
		if auditID != nil {
			res.AuditID = *auditID
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		return res, nil
	}
	return res, err
}

var errDryRun = errors.New("dry run")
