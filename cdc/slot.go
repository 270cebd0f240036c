package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// slotParams holds cdc_slot.sql's parameter.
type slotParams struct {
	Slot string `sql:"slot"`
}

// slotState is a slot's row of pg_replication_slots, as cdc_slot.sql reads it.
type slotState struct {
	ours                   bool   // logical, pgoutput, on this database
	activePID              *int32 // the reader holding it
	walStatus              string
	retained, notConfirmed int64
}

// readSlot returns the slot's state; found reports whether it exists.
func (s *Source) readSlot(ctx context.Context) (st slotState, found bool, err error) {
	q := s.slotQuery
	err = s.pool.QueryRow(ctx, q.SQL, q.Args(&slotParams{Slot: s.cfg.Slot})...).
		Scan(&st.ours, &st.activePID, &st.walStatus, &st.retained, &st.notConfirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("cdc: read slot %s: %w", s.cfg.Slot, err)
	}
	return st, true, nil
}

// setUp checks the server's wal_level and creates the publication if it does not
// exist: FOR TABLE <schema>.events, inserts only (what the relay publishes is what was
// written; updates and deletes are its own settling).
func (s *Source) setUp(ctx context.Context) error {
	var level string
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('wal_level')").Scan(&level); err != nil {
		return fmt.Errorf("cdc: read wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("%w: the server runs with wal_level = %s; set wal_level = logical (a restart) to relay by change data capture", ErrWALLevel, level)
	}
	var exists, covers bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
		EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = 'events')`,
		s.cfg.Slot, s.schema).Scan(&exists, &covers); err != nil {
		return fmt.Errorf("cdc: read publication %s: %w", s.cfg.Slot, err)
	}
	switch {
	case covers:
		return nil
	case exists:
		// it names another table, or an events table dropped since (a schema made
		// again): the Source would stream nothing
		return fmt.Errorf("cdc: publication %s does not publish %s.events (a schema dropped and made again?): drop it (DROP PUBLICATION %s) and the Source creates it again, or ALTER PUBLICATION %s ADD TABLE %s.events",
			s.cfg.Slot, s.schema, s.cfg.Slot, s.cfg.Slot, s.schema)
	}
	create := "CREATE PUBLICATION " + pgx.Identifier{s.cfg.Slot}.Sanitize() + " FOR TABLE " +
		pgx.Identifier{s.schema, "events"}.Sanitize() + " WITH (publish = 'insert')"
	if _, err := s.pool.Exec(ctx, create); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" { // created by another Source meanwhile
			return nil
		}
		return fmt.Errorf("cdc: create publication %s: %w", s.cfg.Slot, err)
	}
	s.log.InfoContext(ctx, "publication created")
	return nil
}

// ensureSlot checks the slot, or creates it when there is none. A lost slot is
// ErrSlotLost (never recreated here: the operator drops it), one held by another
// reader errSlotBusy. A new slot starts at the server's current position: what was
// committed before it is the relay's polling claims' to publish, which it says.
func (s *Source) ensureSlot(ctx context.Context, conn *pgconn.PgConn) error {
	st, found, err := s.readSlot(ctx)
	switch {
	case err != nil:
		return err
	case found && !st.ours:
		return fmt.Errorf("cdc: replication slot %s exists but is not a pgoutput slot of this database: choose another Config.Slot", s.cfg.Slot)
	case found && st.walStatus == "lost":
		return fmt.Errorf("%w: slot %s has wal_status lost (the server removed WAL it had not confirmed); the relay's polling publishes every pending event from the table; drop the slot (SELECT pg_drop_replication_slot('%s')) to start change data capture again", ErrSlotLost, s.cfg.Slot, s.cfg.Slot)
	case found && st.activePID != nil:
		return errSlotBusy
	case found:
		s.noteSlot(st)
		return nil
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, s.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" {
			return errSlotBusy // another reader created it meanwhile
		}
		return fmt.Errorf("cdc: create replication slot %s: %w", s.cfg.Slot, err)
	}
	s.mu.Lock()
	s.state.stats.SlotCreated = true
	s.mu.Unlock()
	var had bool
	if err := s.pool.QueryRow(ctx, s.hasEventsQuery.SQL).Scan(&had); err != nil {
		return fmt.Errorf("cdc: read whether %s.events has rows: %w", s.schema, err)
	}
	if had {
		// Loud: not a first start. What the lost slot had not confirmed is backfilled
		// from the table; what was written table-less and not confirmed is gone.
		s.log.ErrorContext(ctx, "replication slot missing on a database with events: created a new one (a failover or pg_upgrade loses logical slots); events in the table committed before it are published by the relay's polling claims; events written table-less (outbox.Emit) that the lost slot had not confirmed are lost",
			slog.String("consistent_point", res.ConsistentPoint))
		return nil
	}
	s.log.WarnContext(ctx, "replication slot created: events committed before its start are published by the relay's polling claims",
		slog.String("consistent_point", res.ConsistentPoint))
	return nil
}

// look reads the slot's state into the stats, warning when the server may soon remove
// WAL the slot needs (extended, unreserved); a lost slot is ErrSlotLost.
func (s *Source) look(ctx context.Context) error {
	st, found, err := s.readSlot(ctx)
	if err != nil || !found {
		return nil //nolint:nilerr // a failed look changes nothing: the stream reports a broken connection
	}
	if st.walStatus == "lost" {
		s.noteSlot(st)
		return fmt.Errorf("%w: slot %s has wal_status lost while it was read; the relay's polling publishes every pending event from the table", ErrSlotLost, s.cfg.Slot)
	}
	if st.walStatus == "extended" || st.walStatus == "unreserved" {
		s.log.WarnContext(ctx, "replication slot retains WAL past max_wal_size: it will be invalidated unless it catches up",
			slog.String("wal_status", st.walStatus), slog.Int64("retained_bytes", st.retained))
	}
	s.noteSlot(st)
	return nil
}

// noteSlot records the slot's state in the stats.
func (s *Source) noteSlot(st slotState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.stats.WALStatus, s.state.stats.RetainedBytes, s.state.stats.ConfirmedLag = st.walStatus, st.retained, st.notConfirmed
}

// isSlotBusy reports whether err says the slot is held by another reader (55006,
// object_in_use: "replication slot … is active for PID …").
func isSlotBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

// skipGap advances the slot to the server's current position past a stretch of WAL
// pgoutput cannot decode (errPublicationGap): written while the publication did not
// exist. In table mode nothing is lost: every event of the stretch is a row, pending
// until published, and the next session's wake-up has the relay's polling publish it.
// The slot may still be held by the walsender of the session that just ended: then the
// next session meets the stretch again, and this runs again.
func (s *Source) skipGap(ctx context.Context, cause error) {
	var to string
	err := s.pool.QueryRow(ctx, "SELECT end_lsn::text FROM pg_replication_slot_advance($1, pg_current_wal_lsn())", s.cfg.Slot).Scan(&to)
	if err != nil {
		s.log.WarnContext(ctx, "the slot's stream fails on WAL written without its publication; advancing the slot failed, retrying", slog.Any("error", err), slog.Any("cause", cause))
		return
	}
	s.mu.Lock()
	s.state.stats.GapsSkipped++
	s.mu.Unlock()
	s.log.WarnContext(ctx, "the slot was advanced past WAL written while its publication did not exist (dropped and created again): the relay's polling publishes the events of that stretch",
		slog.String("advanced_to", to))
}
