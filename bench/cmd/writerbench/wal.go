package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
)

// walEvents is how many events each statement of the WAL comparison writes.
const walEvents = 500

// walRow is one statement's average WAL per event written.
type walRow struct {
	name           string
	records, bytes float64
	fpi            float64 // full-page images
}

// walPerEvent measures, with EXPLAIN (ANALYZE, WAL), the WAL each way of writing one
// event produces: a figure no other load on the machine changes. Each statement writes
// walEvents events, one per execution, in one transaction into tables emptied and
// checkpointed before and warmed by as many rows first (so page initialisations and
// full-page images do not dominate); the transaction is rolled back.
func walPerEvent(ctx context.Context, pool *pgxpool.Pool) ([]walRow, error) {
	noLock, err := outbox.NewWriter(&outbox.WriterConfig{DisableAggregateLock: true})
	if err != nil {
		return nil, fmt.Errorf("new writer: %w", err)
	}
	ways := []struct {
		name  string
		write func(ctx context.Context, tx pgx.Tx, i int) error
	}{
		{"plain table insert", func(ctx context.Context, tx pgx.Tx, i int) error {
			_, err := tx.Exec(ctx, "EXPLAIN (ANALYZE, WAL, FORMAT JSON) "+benchdb.MinimalInsertSQL, "order/"+strconv.Itoa(i), "order.placed", string(orderEvent(outbox.NewID()).Payload))
			return err
		}},
		{"seed article's table insert", func(ctx context.Context, tx pgx.Tx, i int) error {
			e := orderEvent(outbox.NewID())
			_, err := tx.Exec(ctx, "EXPLAIN (ANALYZE, WAL, FORMAT JSON) "+insertArticleSQL, [16]byte(outbox.NewID()), e.AggregateType, e.AggregateID, e.EventType, string(e.Payload))
			return err
		}},
		{"raw outbox.events insert", func(ctx context.Context, tx pgx.Tx, i int) error {
			e := orderEvent(outbox.NewID())
			_, err := tx.Exec(ctx, "EXPLAIN (ANALYZE, WAL, FORMAT JSON) "+benchdb.RawEventsInsertSQL, [16]byte(outbox.NewID()), e.AggregateType, e.AggregateID, e.EventType, string(e.Payload))
			return err
		}},
		{"Enqueue(PgxTx)", func(ctx context.Context, tx pgx.Tx, i int) error {
			return outbox.Enqueue(ctx, outbox.PgxTx(explainTx{Tx: tx}), orderEvent(outbox.NewID()))
		}},
		{"Enqueue(PgxTx), DisableAggregateLock", func(ctx context.Context, tx pgx.Tx, i int) error {
			return noLock.Enqueue(ctx, outbox.PgxTx(explainTx{Tx: tx}), orderEvent(outbox.NewID()))
		}},
	}
	var out []walRow
	for _, w := range ways {
		if err := resetOrders(ctx, pool); err != nil {
			return nil, err
		}
		row := walRow{name: w.name}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rec := &walRecorder{}
			tracked := trackingTx{Tx: tx, rec: rec}
			for i := range 2 * walEvents {
				if i == walEvents { // the first half warmed the pages
					*rec = walRecorder{}
				}
				if err := w.write(ctx, tracked, i); err != nil {
					return err
				}
			}
			row.records, row.bytes, row.fpi = rec.records/walEvents, rec.bytes/walEvents, rec.fpi/walEvents
			return errRollback
		})
		if err != nil && !errors.Is(err, errRollback) {
			return nil, fmt.Errorf("WAL of %s: %w", w.name, err)
		}
		out = append(out, row)
	}
	return out, resetOrders(ctx, pool)
}

var errRollback = errors.New("roll back")

// walRecorder sums the WAL figures of the EXPLAIN output run through a trackingTx.
type walRecorder struct{ records, bytes, fpi float64 }

// trackingTx reads the output of every EXPLAIN it runs and adds its WAL figures up.
type trackingTx struct {
	pgx.Tx
	rec *walRecorder
}

func (t trackingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var plan string
	if err := t.Tx.QueryRow(ctx, sql, args...).Scan(&plan); err != nil {
		return pgconn.CommandTag{}, err
	}
	var parsed []struct {
		Plan struct {
			Records float64 `json:"WAL Records"`
			Bytes   float64 `json:"WAL Bytes"`
			FPI     float64 `json:"WAL FPI"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &parsed); err != nil || len(parsed) != 1 {
		return pgconn.CommandTag{}, fmt.Errorf("read EXPLAIN output %q: %w", plan, err)
	}
	t.rec.records += parsed[0].Plan.Records
	t.rec.bytes += parsed[0].Plan.Bytes
	t.rec.fpi += parsed[0].Plan.FPI
	return pgconn.CommandTag{}, nil
}

// explainTx runs the statements Enqueue sends as EXPLAIN (ANALYZE, WAL, FORMAT JSON),
// passing them on to the trackingTx under it.
type explainTx struct{ pgx.Tx }

func (t explainTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.Tx.Exec(ctx, "EXPLAIN (ANALYZE, WAL, FORMAT JSON) "+sql, args...)
}

func walMarkdown(rows []walRow) string {
	var s strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&s, format, args...) }
	p("### WAL per event\n\n")
	p("What each way of writing one event adds to the WAL, from `EXPLAIN (ANALYZE, WAL)` of each statement (%d events, one per statement, after as many to warm the pages; the commit record, the same for all, is not counted). ", walEvents)
	p("Unlike throughput, no other load on the machine changes it; the commit's WAL flush grows with it.\n\n")
	p("| way | WAL records/event | WAL bytes/event | full-page images/event |\n|---|---:|---:|---:|\n")
	for _, r := range rows {
		p("| %s | %.2f | %.0f | %.3f |\n", r.name, r.records, r.bytes, r.fpi)
	}
	return s.String()
}
