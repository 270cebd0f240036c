package relay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// PauseKind is what a pause holds: every event, a relay partition or an aggregate type.
type PauseKind string

const (
	// PauseAll holds every event of the schema.
	PauseAll PauseKind = "all"
	// PausePartition holds the events of one relay partition ([PauseScope.Partition]):
	// event partition p is in relay partition p × Partitions / 4096, as the leases
	// divide them (outbox status lists them).
	PausePartition PauseKind = "partition"
	// PauseAggregateType holds the events of one aggregate type
	// ([PauseScope.AggregateType]).
	PauseAggregateType PauseKind = "aggregate_type"
)

// PauseScope names what a pause holds.
type PauseScope struct {
	// Kind says which events. Required.
	Kind PauseKind `json:"kind"`
	// Partition is the relay partition, with PausePartition (0 … Partitions-1).
	Partition int `json:"partition"`
	// AggregateType is the aggregate type, with PauseAggregateType.
	AggregateType string `json:"aggregate_type"`
}

// String describes the scope as an operator writes it: "all", "partition 3",
// "aggregate type order".
func (s PauseScope) String() string {
	switch s.Kind {
	case PausePartition:
		return "partition " + strconv.Itoa(s.Partition)
	case PauseAggregateType:
		return "aggregate type " + strconv.Quote(s.AggregateType)
	default:
		return string(s.Kind)
	}
}

func (s PauseScope) validate() error {
	switch s.Kind {
	case PauseAll:
		if s.Partition != 0 || s.AggregateType != "" {
			return errors.New("Scope: a pause of all names no partition and no aggregate type")
		}
	case PausePartition:
		if s.Partition < 0 {
			return fmt.Errorf("Scope.Partition must not be negative, got %d", s.Partition)
		}
		if s.AggregateType != "" {
			return errors.New("Scope: a partition pause names no aggregate type")
		}
	case PauseAggregateType:
		if s.AggregateType == "" || !utf8.ValidString(s.AggregateType) || len(s.AggregateType) > 255 {
			return errors.New("Scope.AggregateType must be 1-255 bytes of UTF-8")
		}
		if s.Partition != 0 {
			return errors.New("Scope: an aggregate type pause names no partition")
		}
	default:
		return fmt.Errorf("Scope.Kind must be %q, %q or %q, got %q", PauseAll, PausePartition, PauseAggregateType, s.Kind)
	}
	return nil
}

// PauseRequest is an operator's request to pause or resume the relaying of a scope.
type PauseRequest struct {
	// Schema holding the outbox tables. Default "outbox".
	Schema string
	// Scope is what to pause or resume. Required.
	Scope PauseScope
	// Actor says who acts (a user name, a ticket). Required; recorded in pauses.
	Actor string
	// Reason says why. Required; recorded in pauses.
	Reason string
}

func (r PauseRequest) validate() (string, error) {
	quoted, err := sqlq.QuoteSchema(cmp.Or(r.Schema, sqlq.DefaultSchema))
	if err != nil {
		return "", fmt.Errorf("Schema: %w", err)
	}
	if err := r.Scope.validate(); err != nil {
		return "", err
	}
	switch {
	case r.Actor == "":
		return "", errors.New("Actor must not be empty: pauses and resumes are audited")
	case r.Reason == "":
		return "", errors.New("Reason must not be empty: pauses and resumes are audited")
	}
	return quoted, nil
}

// Paused is a pause, active or resumed: the row of the pauses table.
type Paused struct {
	// ID is the pause's number.
	ID int64 `json:"id"`
	// Scope is what the pause holds.
	Scope PauseScope `json:"scope"`
	// By and Reason say who paused and why; At is when.
	By     string    `json:"paused_by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"paused_at"`
	// ResumedBy, ResumeReason and ResumedAt say who resumed, why and when; empty while
	// the pause is active.
	ResumedBy    string     `json:"resumed_by,omitempty"`
	ResumeReason string     `json:"resume_reason,omitempty"`
	ResumedAt    *time.Time `json:"resumed_at,omitempty"`
}

// MarshalJSON writes the scope as {"kind": …} with its partition or aggregate type.
func (s PauseScope) MarshalJSON() ([]byte, error) {
	switch s.Kind {
	case PausePartition:
		return fmt.Appendf(nil, `{"kind":%q,"partition":%d}`, s.Kind, s.Partition), nil
	case PauseAggregateType:
		return fmt.Appendf(nil, `{"kind":%q,"aggregate_type":%s}`, s.Kind, strconv.Quote(s.AggregateType)), nil
	default:
		return fmt.Appendf(nil, `{"kind":%q}`, s.Kind), nil
	}
}

// UnmarshalJSON reads the scope MarshalJSON writes, and refuses one that leaves out
// what its kind needs: {"kind": "partition"} without "partition" is not partition 0.
func (s *PauseScope) UnmarshalJSON(b []byte) error {
	var v struct {
		Kind          PauseKind `json:"kind"`
		Partition     *int      `json:"partition"`
		AggregateType *string   `json:"aggregate_type"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("scope: %w", err)
	}
	*s = PauseScope{Kind: v.Kind}
	switch {
	case v.Kind == PausePartition && v.Partition == nil:
		return errors.New(`scope: kind "partition" needs "partition"`)
	case v.Kind == PauseAggregateType && v.AggregateType == nil:
		return errors.New(`scope: kind "aggregate_type" needs "aggregate_type"`)
	}
	if v.Partition != nil {
		s.Partition = *v.Partition
	}
	if v.AggregateType != nil {
		s.AggregateType = *v.AggregateType
	}
	return nil
}

// pauseParams are the parameters of pause.sql and resume.sql.
type pauseParams struct {
	Scope         string  `sql:"scope"`
	Partition     *int    `sql:"partition"`
	AggregateType *string `sql:"aggregate_type"`
	Actor         string  `sql:"actor"`
	Reason        string  `sql:"reason"`
}

func (r PauseRequest) params() *pauseParams {
	p := &pauseParams{Scope: string(r.Scope.Kind), Actor: r.Actor, Reason: r.Reason}
	switch r.Scope.Kind {
	case PausePartition:
		p.Partition = &r.Scope.Partition
	case PauseAggregateType:
		p.AggregateType = &r.Scope.AggregateType
	}
	return p
}

// ErrInvalidPauseRequest is matched by the error [Pause] and [Resume] return for a
// request they refuse before asking the database; the error names the field.
var ErrInvalidPauseRequest = errors.New("invalid pause request")

// ErrNoSuchPartition is matched by the error [Pause] returns when its scope names a
// relay partition the schema's relays do not have.
var ErrNoSuchPartition = errors.New("no such relay partition")

// ErrNotWoken is matched by the error [Resume] returns when the resume is done (its
// Paused is valid) but the wake-up could not be sent: the relays resume at their next
// poll instead of at once.
var ErrNotWoken = errors.New("resumed, but the relays were not woken")

// ErrNotPaused is matched by the error [Resume] returns when its scope is not paused.
var ErrNotPaused = errors.New("not paused")

// pausePartitionsParams are pause_partitions.sql's.
type pausePartitionsParams struct {
	DefaultPartitions int `sql:"default_partitions"` // the count before any relay started
}

// Pause stops every relay of the schema from claiming the events of r.Scope, from the
// commit of the pause on: each claim reads the active pauses in its own snapshot, so a
// batch claimed before it finishes, and no later one takes a paused event. Events are
// still enqueued; they wait, pending and in order, for [Resume]. It records who and why,
// and returns the scope's active pause; made is false when the scope was paused already
// (nothing is changed then: the earlier pause stands).
//
// A paused aggregate type or partition is stepped over by the claims: an unordered claim
// reads the paused rows in seq order and filters them (those older than what it takes,
// and the rest when it does not fill its batch), so pause a type for an incident, not as
// a filter kept for days. Relays of a version before the pauses migration ignore pauses.
func Pause(ctx context.Context, pool *pgxpool.Pool, r PauseRequest) (p Paused, made bool, err error) {
	quoted, err := r.validate()
	if err != nil {
		return Paused{}, false, fmt.Errorf("pause: %w: %w", ErrInvalidPauseRequest, err)
	}
	if r.Scope.Kind == PausePartition {
		var n int
		count := sqlq.Bind[pausePartitionsParams]("pause_partitions", quoted)
		if err := pool.QueryRow(ctx, count.SQL, count.Args(&pausePartitionsParams{DefaultPartitions: DefaultPartitions})...).Scan(&n); err != nil {
			return Paused{}, false, fmt.Errorf("pause: %w", sqlq.NotMigrated(cmp.Or(r.Schema, sqlq.DefaultSchema), err))
		}
		if r.Scope.Partition >= n {
			return Paused{}, false, fmt.Errorf("pause: Scope.Partition %d: %w: the schema's relays have %d (0-%d)", r.Scope.Partition, ErrNoSuchPartition, n, n-1)
		}
	}
	stmt := sqlq.Bind[pauseParams]("pause", quoted)
	for range 3 { // no row: a concurrent pause of the scope, not yet in our snapshot
		rows, err := pool.Query(ctx, stmt.SQL, stmt.Args(r.params())...)
		if err != nil {
			return Paused{}, false, fmt.Errorf("pause: %w", sqlq.NotMigrated(cmp.Or(r.Schema, sqlq.DefaultSchema), err))
		}
		found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (pauseRow, error) {
			var pr pauseRow
			err := row.Scan(append(pr.dest(), &pr.made)...)
			return pr, err
		})
		if err != nil {
			return Paused{}, false, fmt.Errorf("pause: %w", err)
		}
		if len(found) > 0 {
			return found[0].paused(), found[0].made, nil
		}
	}
	return Paused{}, false, fmt.Errorf("pause %s: raced by concurrent pauses and resumes of the same scope: try again", r.Scope)
}

// Resume ends the active pause of r.Scope, recording who and why, wakes the schema's
// relays (those that listen claim at once; the others at their next poll) and returns
// the pause it ended. When the scope is not paused, the error matches [ErrNotPaused];
// when only the wake-up failed, the pause is ended and the error matches [ErrNotWoken].
// Resuming one scope leaves the others paused: a paused aggregate type stays paused
// after "all" is resumed.
func Resume(ctx context.Context, pool *pgxpool.Pool, r PauseRequest) (Paused, error) {
	quoted, err := r.validate()
	if err != nil {
		return Paused{}, fmt.Errorf("resume: %w: %w", ErrInvalidPauseRequest, err)
	}
	stmt := sqlq.Bind[pauseParams]("resume", quoted)
	rows, err := pool.Query(ctx, stmt.SQL, stmt.Args(r.params())...)
	if err != nil {
		return Paused{}, fmt.Errorf("resume: %w", sqlq.NotMigrated(cmp.Or(r.Schema, sqlq.DefaultSchema), err))
	}
	found, err := pgx.CollectRows(rows, scanPause)
	if err != nil {
		return Paused{}, fmt.Errorf("resume: %w", err)
	}
	if len(found) == 0 {
		return Paused{}, fmt.Errorf("resume %s: %w", r.Scope, ErrNotPaused)
	}
	notify := sqlq.Bind[sqlq.NotifyParams]("notify", "")
	if _, err := pool.Exec(ctx, notify.SQL, notify.Args(&sqlq.NotifyParams{Channel: outbox.WakeupChannel(cmp.Or(r.Schema, sqlq.DefaultSchema))})...); err != nil {
		return found[0], fmt.Errorf("resume %s: %w (they claim at their next poll): %w", r.Scope, ErrNotWoken, err)
	}
	return found[0], nil
}

// pausesParams are pauses.sql's.
type pausesParams struct {
	ActiveOnly bool `sql:"active_only"`
	Limit      int  `sql:"limit"`
}

// ListPauses returns the schema's pauses, newest first: the active ones, or with
// history the resumed ones too, at most limit (0: 1000).
func ListPauses(ctx context.Context, pool *pgxpool.Pool, schema string, history bool, limit int) ([]Paused, error) {
	quoted, err := sqlq.QuoteSchema(cmp.Or(schema, sqlq.DefaultSchema))
	if err != nil {
		return nil, fmt.Errorf("pauses: Schema: %w", err)
	}
	if limit <= 0 {
		limit = 1000
	}
	stmt := sqlq.Bind[pausesParams]("pauses", quoted)
	rows, err := pool.Query(ctx, stmt.SQL, stmt.Args(&pausesParams{ActiveOnly: !history, Limit: limit})...)
	if err != nil {
		return nil, fmt.Errorf("pauses: %w", sqlq.NotMigrated(cmp.Or(schema, sqlq.DefaultSchema), err))
	}
	ps, err := pgx.CollectRows(rows, scanPause)
	if err != nil {
		return nil, fmt.Errorf("pauses: %w", err)
	}
	return ps, nil
}

// pauseRow is a row of pause_columns.sql, with pause.sql's made.
type pauseRow struct {
	id                      int64
	kind                    string
	partition               *int
	aggregateType           *string
	by, reason              string
	at                      time.Time
	resumedBy, resumeReason *string
	resumedAt               *time.Time
	made                    bool
}

func (r *pauseRow) dest() []any {
	return []any{&r.id, &r.kind, &r.partition, &r.aggregateType, &r.by, &r.reason, &r.at, &r.resumedBy, &r.resumeReason, &r.resumedAt}
}

func (r *pauseRow) paused() Paused {
	p := Paused{ID: r.id, Scope: PauseScope{Kind: PauseKind(r.kind)}, By: r.by, Reason: r.reason, At: r.at, ResumedAt: r.resumedAt}
	if r.partition != nil {
		p.Scope.Partition = *r.partition
	}
	if r.aggregateType != nil {
		p.Scope.AggregateType = *r.aggregateType
	}
	if r.resumedBy != nil {
		p.ResumedBy = *r.resumedBy
	}
	if r.resumeReason != nil {
		p.ResumeReason = *r.resumeReason
	}
	return p
}

func scanPause(row pgx.CollectableRow) (Paused, error) {
	var r pauseRow
	if err := row.Scan(r.dest()...); err != nil {
		return Paused{}, err
	}
	return r.paused(), nil
}
