package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// runFunc runs the caller's handler on one message, in the open transaction.
type runFunc func(ctx context.Context, m outbox.Message) error

// QuarantineKind says why an event was quarantined.
type QuarantineKind string

const (
	// QuarantineSchema means the consumer does not accept the event's (event type, schema
	// version) ([Config.Accept]); the handler did not run.
	QuarantineSchema QuarantineKind = "schema"
	// QuarantinePanic means the handler panicked; its work was rolled back.
	QuarantinePanic QuarantineKind = "panic"
	// QuarantinePermanent means the handler returned an error marked with
	// [outbox.Permanent] (or the event cannot be parked: another event holds its
	// version); its work was rolled back.
	QuarantinePermanent QuarantineKind = "permanent"
)

type quarantineRecord struct {
	msg    outbox.Message
	kind   QuarantineKind
	reason string
}

// maxPanicStack bounds the stack kept in a panic's quarantine reason.
const maxPanicStack = 4096

// aggregateKey is a consumer's aggregate: the key of its version row and of its parked
// events, in the parameters of the statements that read or move them.
type aggregateKey struct {
	Consumer      string `sql:"consumer"`
	AggregateType string `sql:"aggregate_type"`
	AggregateID   string `sql:"aggregate_id"`
}

func (c *Consumer) aggregate(m outbox.Message) aggregateKey {
	return aggregateKey{Consumer: c.name, AggregateType: m.AggregateType, AggregateID: m.AggregateID}
}

// recordParams are inbox_record.sql's.
type recordParams struct {
	Aggregate        aggregateKey `sql:",inline"`
	EventID          uuid.UUID    `sql:"event_id"`
	AggregateVersion int64        `sql:"aggregate_version"`
	EventType        string       `sql:"event_type"`
}

// outcomeParams are inbox_outcome.sql's.
type outcomeParams struct {
	Consumer string    `sql:"consumer"`
	EventID  uuid.UUID `sql:"event_id"`
	Outcome  string    `sql:"outcome"`
}

// versionLockParams are inbox_version_lock.sql's.
type versionLockParams struct {
	Aggregate aggregateKey `sql:",inline"`
	Initial   int64        `sql:"initial"` // the last version of an aggregate never seen
}

// versionSetParams are inbox_version_set.sql's.
type versionSetParams struct {
	Aggregate aggregateKey `sql:",inline"`
	Read      int64        `sql:"read"`     // the version read under the lock
	NewLast   int64        `sql:"new_last"` // the version to move to
}

// process is the one path of every delivery and replay, inside the open transaction db.
// replayed is nil for a delivery; for a replay (the dedup row exists, the quarantine row
// was just taken) it holds the attempts so far.
func (c *Consumer) process(ctx context.Context, db conn, msg outbox.Message, run runFunc, st *tally, replayed *int) (Result, error) {
	stored, attempts := "applied", 1 // the outcome the dedup row holds, the quarantine attempt
	if replayed == nil {
		n, err := db.exec(ctx, c.q.record.SQL, c.q.record.Args(&recordParams{
			Aggregate: c.aggregate(msg), EventID: msg.ID, AggregateVersion: msg.AggregateVersion, EventType: msg.EventType,
		})...)
		if err != nil {
			return Result{}, fmt.Errorf("record the event: %w", sqlq.NotMigrated(c.schema, err))
		}
		if n == 0 {
			st.duplicates++
			return Result{Outcome: Duplicate}, nil
		}
	} else {
		stored, attempts = "quarantined", *replayed+1
	}
	settle := func(outcome string) error {
		if outcome == stored {
			return nil
		}
		p := outcomeParams{Consumer: c.name, EventID: msg.ID, Outcome: outcome}
		if _, err := db.exec(ctx, c.q.outcome.SQL, c.q.outcome.Args(&p)...); err != nil {
			return fmt.Errorf("settle the outcome %s: %w", outcome, err)
		}
		return nil
	}
	applied := func() {
		st.applied++
		if replayed != nil {
			st.replayed++
		}
	}

	if msg.AggregateVersion == 0 {
		q, err := c.apply(ctx, db, msg, run, st)
		if err != nil {
			return Result{}, err
		}
		if q != nil {
			return c.quarantine(ctx, db, *q, attempts, st)
		}
		applied()
		return Result{Outcome: Applied}, settle("applied")
	}

	// The version row is locked from here to the end of the transaction: every decision
	// below is made on the latest committed version, and no one else moves it meanwhile.
	initial := int64(0)
	if c.firstVersion == FirstVersionAny {
		initial = msg.AggregateVersion - 1
	}
	var last int64
	lock := versionLockParams{Aggregate: c.aggregate(msg), Initial: initial}
	if err := db.queryRow(ctx, c.q.versionLock.SQL, c.q.versionLock.Args(&lock)...).Scan(&last); err != nil {
		return Result{}, fmt.Errorf("lock the aggregate's version: %w", err)
	}
	v := msg.AggregateVersion
	switch {
	case v <= last:
		st.stale++
		return Result{Outcome: Stale}, settle("stale")
	case v > last+1 && c.gap == GapRetry:
		return Result{}, &GapError{Last: last, Version: v}
	case v > last+1 && c.gap == GapPark:
		if !c.accepts(msg) {
			return c.quarantine(ctx, db, c.schemaRecord(msg), attempts, st)
		}
		return c.park(ctx, db, msg, attempts, st)
	}

	// The next version (or past a gap, GapApply): apply it, then what it unparks.
	q, err := c.apply(ctx, db, msg, run, st)
	if err != nil {
		return Result{}, err
	}
	if q != nil {
		return c.quarantine(ctx, db, *q, attempts, st) // the version stays: the aggregate waits for a replay
	}
	applied()
	res := Result{Outcome: Applied}
	newLast, err := c.unpark(ctx, db, msg, last, run, &res, st)
	if err != nil {
		return Result{}, err
	}
	set := versionSetParams{Aggregate: c.aggregate(msg), Read: last, NewLast: newLast}
	n, err := db.exec(ctx, c.q.versionSet.SQL, c.q.versionSet.Args(&set)...)
	if err != nil {
		return Result{}, fmt.Errorf("move the aggregate's version to %d: %w", newLast, err)
	}
	if n != 1 {
		return Result{}, fmt.Errorf("move the aggregate's version from %d to %d: the row changed under its lock", last, newLast)
	}
	return res, settle("applied")
}

// unparkParams are inbox_unpark.sql's.
type unparkParams struct {
	Aggregate      aggregateKey `sql:",inline"`
	NewLast        int64        `sql:"new_last"`        // the aggregate's new last version
	ClosingVersion int64        `sql:"closing_version"` // the version of the event that closed the gap
}

// unpark applies, after msg (applied at its version), the aggregate's parked events that
// follow it without a gap, in version order, and returns the aggregate's new last
// version. Parked events at or below msg's version (overtaken under GapApply) become
// stale. A parked event that is quarantined stops the walk: the version stays before it.
func (c *Consumer) unpark(ctx context.Context, db conn, msg outbox.Message, last int64, run runFunc, res *Result, st *tally) (int64, error) {
	parked, err := c.parkedAfter(ctx, db, msg, last)
	if err != nil {
		return 0, err
	}
	v, newLast := msg.AggregateVersion, msg.AggregateVersion
	var overtaken int64
	for _, p := range parked {
		if p.AggregateVersion <= v {
			overtaken++
			continue
		}
		if p.AggregateVersion != newLast+1 {
			break
		}
		q, err := c.apply(ctx, db, p, run, st)
		if err != nil {
			return 0, fmt.Errorf("apply parked event %s (version %d): %w", p.ID, p.AggregateVersion, err)
		}
		if q != nil {
			if _, err := c.quarantine(ctx, db, *q, 1, st); err != nil {
				return 0, err
			}
			res.Reason = q.reason
			break
		}
		newLast = p.AggregateVersion
		res.Unparked = append(res.Unparked, p.ID)
	}
	if len(parked) > 0 {
		p := unparkParams{Aggregate: c.aggregate(msg), NewLast: newLast, ClosingVersion: v}
		if _, err := db.exec(ctx, c.q.unpark.SQL, c.q.unpark.Args(&p)...); err != nil {
			return 0, fmt.Errorf("take the applied events out of the park: %w", err)
		}
	}
	st.applied += int64(len(res.Unparked))
	st.unparked += int64(len(res.Unparked))
	st.stale += overtaken
	return newLast, nil
}

// apply runs the handler on msg in a savepoint. A panic or a permanent error rolls back
// to the savepoint and returns the quarantine record to write; any other error is
// returned (the whole transaction rolls back). The handler's time is added to st.
func (c *Consumer) apply(ctx context.Context, db conn, msg outbox.Message, run runFunc, st *tally) (*quarantineRecord, error) {
	if !c.accepts(msg) {
		q := c.schemaRecord(msg)
		return &q, nil
	}
	if _, err := db.exec(ctx, c.q.savepoint); err != nil {
		return nil, fmt.Errorf("open the handler's savepoint: %w", err)
	}
	began := time.Now()
	err := call(ctx, run, msg)
	st.handler += time.Since(began)
	if err == nil {
		if _, err := db.exec(ctx, c.q.release); err != nil {
			return nil, fmt.Errorf("release the handler's savepoint: %w", err)
		}
		return nil, nil
	}
	q := &quarantineRecord{msg: msg, reason: err.Error()}
	var p *panicError
	switch {
	case errors.As(err, &p):
		q.kind = QuarantinePanic
	case outbox.IsPermanent(err):
		q.kind = QuarantinePermanent
	default:
		return nil, fmt.Errorf("handler: %w", err)
	}
	if _, err := db.exec(ctx, c.q.rollbackTo); err != nil {
		return nil, fmt.Errorf("roll back the handler's work (%s): %w", q.reason, err)
	}
	if _, err := db.exec(ctx, c.q.release); err != nil {
		return nil, fmt.Errorf("release the handler's savepoint: %w", err)
	}
	return q, nil
}

type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string {
	stack := e.stack
	if len(stack) > maxPanicStack {
		stack = stack[:maxPanicStack]
	}
	return fmt.Sprintf("handler panicked: %v\n%s", e.value, stack)
}

// call runs the handler, turning a panic into a *panicError.
func call(ctx context.Context, run runFunc, msg outbox.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return run(ctx, msg)
}

func (c *Consumer) accepts(m outbox.Message) bool {
	return c.accept == nil || c.accept[Schema{EventType: m.EventType, SchemaVersion: m.SchemaVersion}]
}

func (c *Consumer) schemaRecord(m outbox.Message) quarantineRecord {
	return quarantineRecord{msg: m, kind: QuarantineSchema, reason: fmt.Sprintf(
		"consumer %s does not accept event type %q at schema version %d (Config.Accept)", c.name, m.EventType, m.SchemaVersion)}
}

// storedEvent is an event as the park and the quarantine store it: inbox_park.sql's
// parameters, and most of inbox_quarantine.sql's.
type storedEvent struct {
	Aggregate        aggregateKey `sql:",inline"`
	EventID          uuid.UUID    `sql:"event_id"`
	AggregateVersion int64        `sql:"aggregate_version"`
	Seq              int64        `sql:"seq"`
	EventType        string       `sql:"event_type"`
	SchemaVersion    int          `sql:"schema_version"`
	Topic            string       `sql:"topic"`
	Headers          any          `sql:"headers"` // JSON text, or nil for none (headersJSON)
	ContentType      string       `sql:"content_type"`
	Payload          []byte       `sql:"payload"`
	TraceParent      string       `sql:"trace_parent"`
	CreatedAt        time.Time    `sql:"created_at"`
}

func (c *Consumer) storedEvent(m *outbox.Message, headers any) storedEvent {
	return storedEvent{
		Aggregate: c.aggregate(*m), EventID: m.ID, AggregateVersion: m.AggregateVersion, Seq: m.Seq,
		EventType: m.EventType, SchemaVersion: m.SchemaVersion, Topic: m.Topic, Headers: headers,
		ContentType: m.ContentType, Payload: m.Payload, TraceParent: m.TraceParent, CreatedAt: m.CreatedAt,
	}
}

// quarantineParams are inbox_quarantine.sql's.
type quarantineParams struct {
	Event    storedEvent `sql:",inline"`
	Kind     string      `sql:"kind"`
	Reason   string      `sql:"reason"`
	Attempts int         `sql:"attempts"`
}

// quarantine stores q with its reason and settles its dedup row.
func (c *Consumer) quarantine(ctx context.Context, db conn, q quarantineRecord, attempts int, st *tally) (Result, error) {
	m := &q.msg
	h, err := headersJSON(m.Headers)
	if err != nil {
		return Result{}, err
	}
	p := quarantineParams{Event: c.storedEvent(m, h), Kind: string(q.kind), Reason: q.reason, Attempts: attempts}
	if _, err := db.exec(ctx, c.q.quarantine.SQL, c.q.quarantine.Args(&p)...); err != nil {
		return Result{}, fmt.Errorf("quarantine event %s: %w", m.ID, err)
	}
	st.quarantined = append(st.quarantined, q)
	return Result{Outcome: Quarantined, Reason: q.reason}, nil
}

// park stores msg past its aggregate's gap.
func (c *Consumer) park(ctx context.Context, db conn, m outbox.Message, attempts int, st *tally) (Result, error) {
	h, err := headersJSON(m.Headers)
	if err != nil {
		return Result{}, err
	}
	p := c.storedEvent(&m, h)
	n, err := db.exec(ctx, c.q.park.SQL, c.q.park.Args(&p)...)
	if err != nil {
		return Result{}, fmt.Errorf("park event %s: %w", m.ID, err)
	}
	if n == 0 {
		return c.quarantine(ctx, db, quarantineRecord{msg: m, kind: QuarantinePermanent, reason: fmt.Sprintf(
			"another event is parked at version %d of the aggregate: versions are unique per aggregate", m.AggregateVersion)}, attempts, st)
	}
	st.parked++
	return Result{Outcome: Parked}, nil
}

// parkedAfterParams are inbox_parked_after.sql's.
type parkedAfterParams struct {
	Aggregate    aggregateKey `sql:",inline"`
	AfterVersion int64        `sql:"after_version"`
}

// parkedAfter reads the aggregate's parked events above version last, in version order.
func (c *Consumer) parkedAfter(ctx context.Context, db conn, msg outbox.Message, last int64) ([]outbox.Message, error) {
	p := parkedAfterParams{Aggregate: c.aggregate(msg), AfterVersion: last}
	rows, err := db.query(ctx, c.q.parkedAfter.SQL, c.q.parkedAfter.Args(&p)...)
	if err != nil {
		return nil, fmt.Errorf("read the parked events: %w", err)
	}
	defer rows.Close()
	var out []outbox.Message
	for rows.Next() {
		m := outbox.Message{AggregateType: msg.AggregateType, AggregateID: msg.AggregateID, Attempt: 1}
		var headers string
		if err := rows.Scan(&m.ID, &m.Seq, &m.AggregateVersion, &m.EventType, &m.SchemaVersion, &m.Topic, &headers,
			&m.ContentType, &m.Payload, &m.TraceParent, &m.CreatedAt); err != nil {
			return nil, fmt.Errorf("read the parked events: %w", err)
		}
		if m.Headers, err = parseHeaders(headers); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the parked events: %w", err)
	}
	return out, nil
}
