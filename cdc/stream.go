package cdc

import (
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
)

// txn is one committed transaction's inserts into the events table: their seqs, in
// the order it wrote them, and the transaction's end in the WAL (what may be confirmed
// once they are settled).
type txn struct {
	seqs []int64
	end  pglogrepl.LSN
	xid  uint32 // the (top-level) transaction
}

// streamed is a seq written by a transaction streamed before its commit (protocol 2),
// with the (sub)transaction that wrote it.
type streamed struct {
	xid uint32
	seq int64
}

// decoder turns pgoutput's messages into committed transactions. It knows which
// relation is the events table (and where its seq column is) from the Relation
// messages, keeps the inserts of the transaction being read, and buffers those of
// streamed transactions per transaction until their commit — an abort drops them, so
// nothing of a rolled-back transaction is ever handed on.
type decoder struct {
	schema   string
	seqCol   map[uint32]int // relation id of the events table → its seq column (only it is published)
	current  []int64        // the inserts of the transaction between Begin and Commit
	xid      uint32         // its xid
	inTxn    bool
	inStream bool
	stream   uint32                // the transaction of the stream being read
	streams  map[uint32][]streamed // streamed transactions, by top-level xid
}

func newDecoder(schema string) *decoder {
	return &decoder{schema: schema, seqCol: map[uint32]int{}, streams: map[uint32][]streamed{}}
}

// busy reports whether the decoder holds inserts not yet handed on: a transaction
// being read or a streamed one not yet committed (the WAL position may not be
// confirmed past them).
func (d *decoder) busy() bool { return d.inTxn || len(d.streams) > 0 }

// decode takes in one pgoutput message; it returns the transaction it committed, if
// any.
func (d *decoder) decode(data []byte) (*txn, error) {
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
		d.inTxn, d.current, d.xid = true, nil, m.Xid
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
			d.streams[d.stream] = append(d.streams[d.stream], streamed{xid: m.Xid, seq: seq})
		} else {
			d.current = append(d.current, seq)
		}
	case *pglogrepl.CommitMessage:
		t := &txn{seqs: d.current, end: m.TransactionEndLSN, xid: d.xid}
		d.inTxn, d.current = false, nil
		return t, nil
	case *pglogrepl.StreamStartMessageV2:
		d.inStream, d.stream = true, m.Xid
	case *pglogrepl.StreamStopMessageV2:
		d.inStream = false
	case *pglogrepl.StreamCommitMessageV2:
		t := &txn{end: m.TransactionEndLSN, xid: m.Xid}
		for _, s := range d.streams[m.Xid] {
			t.seqs = append(t.seqs, s.seq)
		}
		delete(d.streams, m.Xid)
		return t, nil
	case *pglogrepl.StreamAbortMessageV2:
		if m.SubXid == m.Xid || m.SubXid == 0 {
			delete(d.streams, m.Xid)
			return nil, nil
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
