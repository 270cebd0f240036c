package cdc

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/emitted"
	"github.com/outboxkit/outbox/relay"
)

// txn is one committed transaction's events, in the order it wrote them — the seqs of
// its inserts into the events table and the events it emitted (table-less mode,
// outbox.Writer.Emit) — and the transaction's end in the WAL (what may be confirmed once
// they are settled).
type txn struct {
	items []item
	end   pglogrepl.LSN
	xid   uint32 // the (top-level) transaction
}

// item is one event of a transaction: a row's seq, or (ev set) an emitted event.
type item struct {
	seq int64
	ev  *relay.Emitted
}

// events counts t's events.
func (t *txn) events() int { return len(t.items) }

// errAmbiguousStream ends a session whose stream rolled back a subtransaction of a
// transaction that has emitted events streamed: the Source reads the transaction again
// without streaming, where PostgreSQL drops the subtransaction's messages itself.
var errAmbiguousStream = errors.New("cdc: a streamed transaction rolled back a subtransaction after emitting events")

// ambiguousStreamError is errAmbiguousStream for the transaction xid.
type ambiguousStreamError struct{ xid, subXid uint32 }

func (e *ambiguousStreamError) Error() string {
	return fmt.Sprintf("%v: transaction %d rolled back subtransaction %d", errAmbiguousStream, e.xid, e.subXid)
}

func (e *ambiguousStreamError) Unwrap() error { return errAmbiguousStream }

// streamed is an event of a transaction streamed before its commit (protocol 2), with
// the (sub)transaction that wrote it; ev's CreatedAt is set at the commit.
type streamed struct {
	xid uint32
	item
}

// decoder turns pgoutput's messages into committed transactions. It knows which
// relation is the events table (and where its seq column is) from the Relation
// messages, keeps the inserts of the transaction being read, and buffers those of
// streamed transactions per transaction until their commit — an abort drops them, so
// nothing of a rolled-back transaction is ever handed on.
type decoder struct {
	schema   string
	prefix   string         // of the schema's emitted events (emitted.Prefix)
	seqCol   map[uint32]int // relation id of the events table → its seq column (only it is published)
	current  []item         // the events of the transaction between Begin and Commit
	xid      uint32         // its xid
	commitAt time.Time      // its commit time: the created_at of its emitted events
	inTxn    bool
	inStream bool
	stream   uint32                // the transaction of the stream being read
	streams  map[uint32][]streamed // streamed transactions, by top-level xid
}

func newDecoder(schema string) *decoder {
	return &decoder{schema: schema, prefix: emitted.Prefix(schema), seqCol: map[uint32]int{}, streams: map[uint32][]streamed{}}
}

// busy reports whether the decoder holds inserts not yet handed on: a transaction
// being read or a streamed one not yet committed (the WAL position may not be
// confirmed past them).
func (d *decoder) busy() bool { return d.inTxn || len(d.streams) > 0 }

// decode takes in one pgoutput message; it returns the transaction it committed, if
// any. An emitted message of the schema's prefix that is not the Writer's (it does not
// decode as its rows) is an error of that message only: logged through refuse, counted in
// the Source's Stats.Refused, and skipped.
func (d *decoder) decode(data []byte, refuse func(error)) (*txn, error) {
	msg, err := pglogrepl.ParseV2(data, d.inStream)
	if err != nil {
		return nil, fmt.Errorf("decode pgoutput message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessageV2:
		if m.Namespace != d.schema || m.RelationName != "events" {
			return nil, nil
		}
		for i, c := range m.Columns {
			if c.Name == "seq" {
				d.seqCol[m.RelationID] = i
				return nil, nil
			}
		}
		return nil, fmt.Errorf("decode pgoutput message: %s.events has no seq column", d.schema)
	case *pglogrepl.BeginMessage:
		d.inTxn, d.current, d.xid, d.commitAt = true, nil, m.Xid, m.CommitTime
	case *pglogrepl.LogicalDecodingMessageV2:
		if !m.Transactional || m.Prefix != d.prefix {
			return nil, nil // another tool's message (the Writer's are transactional)
		}
		rows, err := emitted.Decode(m.Content)
		if err != nil {
			refuse(fmt.Errorf("message at %s: %w", m.LSN, err))
			return nil, nil
		}
		for i := range rows {
			it := item{ev: emittedEvent(&rows[i], d.commitAt)}
			if d.inStream {
				d.streams[d.stream] = append(d.streams[d.stream], streamed{xid: m.Xid, item: it})
			} else {
				d.current = append(d.current, it)
			}
		}
	case *pglogrepl.InsertMessageV2:
		col, ok := d.seqCol[m.RelationID]
		if !ok {
			return nil, nil // another table's (the publication names only ours)
		}
		if col >= len(m.Tuple.Columns) || m.Tuple.Columns[col].DataType != 't' {
			return nil, fmt.Errorf("decode insert into %s.events: no seq in the row", d.schema)
		}
		seq, err := strconv.ParseInt(string(m.Tuple.Columns[col].Data), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("decode insert into %s.events: seq: %w", d.schema, err)
		}
		if d.inStream {
			d.streams[d.stream] = append(d.streams[d.stream], streamed{xid: m.Xid, item: item{seq: seq}})
		} else {
			d.current = append(d.current, item{seq: seq})
		}
	case *pglogrepl.CommitMessage:
		t := &txn{items: d.current, end: m.TransactionEndLSN, xid: d.xid}
		d.inTxn, d.current = false, nil
		return t, nil
	case *pglogrepl.StreamStartMessageV2:
		d.inStream, d.stream = true, m.Xid
	case *pglogrepl.StreamStopMessageV2:
		d.inStream = false
	case *pglogrepl.StreamCommitMessageV2:
		t := &txn{end: m.TransactionEndLSN, xid: m.Xid}
		for _, s := range d.streams[m.Xid] {
			if s.ev != nil {
				s.ev.Message.CreatedAt = m.CommitTime
			}
			t.items = append(t.items, s.item)
		}
		delete(d.streams, m.Xid)
		return t, nil
	case *pglogrepl.StreamAbortMessageV2:
		if m.SubXid == m.Xid || m.SubXid == 0 {
			delete(d.streams, m.Xid)
			return nil, nil
		}
		for _, s := range d.streams[m.Xid] {
			if s.ev != nil {
				// PostgreSQL streams a logical decoding message under its top-level
				// transaction's xid, so which emitted events the rolled-back
				// subtransaction wrote cannot be told: read it again unstreamed.
				return nil, &ambiguousStreamError{xid: m.Xid, subXid: m.SubXid}
			}
		}
		// a subtransaction rolled back: its inserts only
		kept := d.streams[m.Xid][:0]
		for _, s := range d.streams[m.Xid] {
			if s.xid != m.SubXid {
				kept = append(kept, s)
			}
		}
		d.streams[m.Xid] = kept
	}
	return nil, nil
}

// emittedEvent is the event of an emitted row, created at its transaction's commit.
func emittedEvent(r *emitted.Row, commitAt time.Time) *relay.Emitted {
	return &relay.Emitted{
		Message: outbox.Message{
			ID: r.ID, AggregateType: r.AggregateType, AggregateID: r.AggregateID, AggregateVersion: r.AggregateVersion,
			EventType: r.EventType, SchemaVersion: r.SchemaVersion, Topic: r.Topic, Headers: r.Headers,
			ContentType: r.ContentType, Payload: r.PayloadBytes(), TraceParent: r.TraceParent, CreatedAt: commitAt,
			Attempt: 1,
		},
		AvailableAt: r.AvailableAt,
	}
}
