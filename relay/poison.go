package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A row that makes every claim including it fail — a value the server cannot render
// (a jsonb payload of numbers with huge exponents renders at 100,000 digits each and
// overruns the 1 GB limit), a trigger that raises, a value the relay cannot read — must
// not stop the relay: whatever is committed, one event never holds up the others. When a
// claim fails on content, the relay lists the rows that claim would have taken, finds the
// one that fails alone by halving the list (each try does to the rows what the claim does,
// in a transaction rolled back), parks it dead with the error, and goes on.

// readError is a claimed value the relay could not read into a message.
type readError struct{ err error }

func (e *readError) Error() string { return "read row: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// contentError reports whether err, from a claim or a try of some rows, may be caused by
// what a row holds: a value the relay cannot read, or a server error of the classes a
// row's content (or a trigger on it) raises — data exceptions (22), integrity
// violations (23), insufficient resources such as out of memory (53, not too many
// connections), program limits (54), a PL/pgSQL RAISE (P0) and internal errors (XX:
// "invalid memory alloc request size"). Connection, serialization, lock, timeout and
// syntax errors are not: halving cannot find them in a row.
func contentError(err error) bool {
	var re *readError
	if errors.As(err, &re) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54", "P0", "XX":
		return true
	case "53":
		return pgErr.Code != "53300" // too_many_connections
	}
	return false
}

// isolatePoison runs after a claim in scope failed with cause, a content error, on conn
// (the claim's connection, its transaction rolled back). It finds the row that makes the
// claim fail and parks it dead; it reports whether it parked one. When no single row
// fails alone (the rows fail only together: too much at once), it parks nothing.
func (b *batcher) isolatePoison(ctx context.Context, conn *pgx.Conn, scope claimScope, cause error) (bool, error) {
	q := b.claimQuery(scope, b.floor.args(time.Now(), scope.worker))
	var candidates []int64
	if err := rolledBack(ctx, conn, func(tx pgx.Tx) error {
		for _, set := range claimSettings {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, b.q.poisonCandidates.sql, b.q.poisonCandidates.args(q)...)
		if err != nil {
			return err
		}
		candidates, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	}); err != nil {
		return false, fmt.Errorf("list the rows of a failed claim: %w", err)
	}
	seq, reason, err := b.findPoison(ctx, conn, candidates)
	if err != nil || seq == 0 {
		return false, err
	}
	park := poisonParkParams{Seq: seq, Reason: truncate("unreadable row: every claim including it fails: " + reason)}
	tag, err := conn.Exec(ctx, b.q.poisonPark.SQL, b.q.poisonPark.Args(&park)...)
	if err != nil {
		return false, fmt.Errorf("park the row that fails every claim (seq %d): %w", seq, err)
	}
	if tag.RowsAffected() == 1 {
		b.stats.dead.Add(1)
		b.stats.poisonRows.Add(1)
		b.log.WarnContext(ctx, "event dead: every claim including it fails", slog.Int64("seq", seq), slog.String("error", reason), slog.Any("claim_error", cause))
	}
	return true, nil
}

// findPoison returns the one row of candidates that fails a try alone, with the error, or
// 0 when none does (the claim's failure does not come back, or its rows fail only
// together). A try of rows that fail can be slow (rendering a row until the server gives
// up took 2.3 s), so the search keeps those few: the rows are tried largest first (the
// likeliest to fail to render), one by one when they are few, else in 16 groups, going
// into the first group that fails — at most two failing tries for a batch of 1,000.
func (b *batcher) findPoison(ctx context.Context, conn *pgx.Conn, candidates []int64) (seq int64, reason string, err error) {
	try := func(seqs []int64) (failure error, err error) {
		err = rolledBack(ctx, conn, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, b.q.poisonTry.SQL, b.q.poisonTry.Args(&seqsParams{Seqs: seqs})...)
			if err != nil {
				return err
			}
			_, err = b.readClaimed(rows, len(seqs), nil)
			return err
		})
		if contentError(err) {
			return err, nil
		}
		return nil, err
	}
	rows, err := conn.Query(ctx, b.q.poisonBySize.SQL, b.q.poisonBySize.Args(&seqsParams{Seqs: candidates})...)
	if err != nil {
		return 0, "", fmt.Errorf("order the rows of a failed claim by size: %w", err)
	}
	set, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, "", fmt.Errorf("order the rows of a failed claim by size: %w", err)
	}
	for {
		groups := split(set, 16)
		if len(set) <= poisonSingles {
			groups = split(set, len(set))
		}
		var failing []int64
		for _, g := range groups {
			failure, err := try(g)
			if err != nil {
				return 0, "", err
			}
			if failure != nil {
				failing, reason = g, errorText(failure)
				break
			}
		}
		switch {
		case failing == nil:
			return 0, "", nil
		case len(failing) == 1:
			return failing[0], reason, nil
		}
		set = failing
	}
}

// poisonSingles: a failed claim of at most this many rows is searched row by row.
const poisonSingles = 64

// split cuts s into n parts of nearly equal length, in order.
func split(s []int64, n int) [][]int64 {
	n = max(1, min(n, len(s)))
	parts := make([][]int64, 0, n)
	for i := range n {
		parts = append(parts, s[i*len(s)/n:(i+1)*len(s)/n])
	}
	return parts
}

// errRolledBack ends the transactions of rolledBack.
var errRolledBack = errors.New("rolled back on purpose")

// rolledBack runs fn in a transaction on conn and rolls it back.
func rolledBack(ctx context.Context, conn *pgx.Conn, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errRolledBack
	})
	if errors.Is(err, errRolledBack) {
		return nil
	}
	return err
}

// claimFailed handles a claim that failed with err: a failure a row's content may cause
// is looked for in the rows (isolatePoison); when one row explains it, it is parked dead
// and the next batch goes on at once. A claim that fails without one row to blame — the
// rows fail only together, or the server cancelled the statement (a statement_timeout
// set by the DBA) — makes the next claims smaller (halved each time, recovering one step
// per claim that succeeds), so no single huge statement is retried for ever.
func (b *batcher) claimFailed(ctx context.Context, tx *batchTx, scope claimScope, err error) (batchResult, error) {
	timedOut := isStatementTimeout(err)
	if !contentError(err) && !timedOut {
		return batchResult{}, err
	}
	if rerr := tx.rollback(ctx); rerr != nil {
		return batchResult{}, errors.Join(err, rerr)
	}
	if !timedOut {
		parked, perr := b.isolatePoison(ctx, tx.conn.Conn(), scope, err)
		switch {
		case perr != nil:
			return batchResult{}, errors.Join(err, perr)
		case parked:
			return batchResult{claimed: 1, dead: 1}, nil
		}
	}
	b.narrowClaims()
	return batchResult{}, err
}

// maxNarrow bounds how far failed claims shrink the next ones: BatchSize / 2^maxNarrow.
const maxNarrow = 12

// narrowClaims halves the size of the next claims (down to one row).
func (b *batcher) narrowClaims() {
	b.succeeded.Store(0)
	if n := b.narrow.Load(); n < maxNarrow {
		b.narrow.CompareAndSwap(n, n+1)
		b.log.Warn("claims narrowed after a failed claim", slog.Int("batch_size", max(1, b.cfg.BatchSize>>(n+1))))
	}
}

// widenAfter is how many claims in a row must succeed before one halving is undone: a
// claim size that just failed is not tried again at once.
const widenAfter = 16

// widenClaims counts a claim that succeeded, undoing one halving after widenAfter of them.
func (b *batcher) widenClaims() {
	if b.narrow.Load() == 0 {
		return
	}
	if b.succeeded.Add(1)%widenAfter == 0 {
		if n := b.narrow.Load(); n > 0 {
			b.narrow.CompareAndSwap(n, n-1)
		}
	}
}

// narrowed is limit after the halvings in force (at least 1).
func (b *batcher) narrowed(limit int) int { return max(1, limit>>b.narrow.Load()) }

// isStatementTimeout reports whether the server cancelled the statement (57014: a
// statement_timeout, or a cancel request).
func isStatementTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// errorText is err's message with the server's detail, which says what overran (the
// message alone may say only "out of memory").
func errorText(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Detail != "" {
		return err.Error() + ": " + pgErr.Detail
	}
	return err.Error()
}

// seqsParams holds the parameter of poison_try_*.sql and poison_by_size.sql: rows by seq.
type seqsParams struct {
	Seqs []int64 `sql:"seqs"`
}

// poisonParkParams holds poison_park.sql's parameters.
type poisonParkParams struct {
	Seq    int64  `sql:"seq"`
	Reason string `sql:"reason"`
}
