package cdc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/emitted"
	"github.com/outboxkit/outbox/internal/sqlq"
	"github.com/outboxkit/outbox/relay"
)

// Defaults of [Config].
const (
	DefaultStatusInterval = time.Second
	DefaultRetryDelay     = time.Second
	DefaultMaxRetryDelay  = 30 * time.Second
	DefaultMaxPending     = 10_000
)

// Config configures a [Source]. The zero value is usable.
type Config struct {
	// Slot names the replication slot, and the publication of the same name. Default
	// "outbox_cdc_<schema>". 1 to 63 lowercase letters, digits and underscores.
	Slot string
	// StatusInterval is how often the Source tells the server what it has confirmed
	// (and what it received) and reads the slot's state (Stats). Default
	// [DefaultStatusInterval] (1s).
	StatusInterval time.Duration
	// RetryDelay is the first wait after a failed session (the connection lost, the slot
	// held by another reader); it doubles up to MaxRetryDelay. Defaults
	// [DefaultRetryDelay] (1s), [DefaultMaxRetryDelay] (30s).
	RetryDelay, MaxRetryDelay time.Duration
	// MaxPending is the most events read from the WAL and not yet settled; past it the
	// Source stops reading until the relay catches up. Default [DefaultMaxPending].
	MaxPending int
	// Logger receives the Source's logs. Default: the relay's logger's handler.
	Logger *slog.Logger
}

// ErrWALLevel is returned by [Source.Run] when the server's wal_level is not logical.
var ErrWALLevel = errors.New("cdc: wal_level is not logical")

// ErrSlotLost is returned by [Source.Run] when the slot was invalidated (wal_status
// lost: the server removed WAL it had not confirmed). The Source does not recreate it:
// the relay's polling claims still publish every pending event from the table; drop
// the slot to let a new Source create a new one.
var ErrSlotLost = errors.New("cdc: replication slot lost")

// errSlotBusy: another reader holds the slot.
var errSlotBusy = errors.New("cdc: replication slot is active for another reader")

// errStreamAgain ends a session read without streaming once it has confirmed the
// transaction that made it read so (Source.unstreamed): the next one streams again.
var errStreamAgain = errors.New("cdc: streaming again")

// errPublicationGap: the stream reached WAL written while the publication did not
// exist (it was dropped and created again), which pgoutput cannot decode: it fails on it
// on every start.
var errPublicationGap = errors.New("cdc: the slot's WAL holds a stretch written while its publication did not exist")

// Source reads the inserts into an outbox's events table from a logical replication
// slot and has a relay publish them by seq. Create it with [New]; run it with
// [Source.Run] beside the relay's [relay.Relay.Run].
type Source struct {
	pool   *pgxpool.Pool
	relay  *relay.Relay
	cfg    Config
	schema string
	log    *slog.Logger

	// confirmOnReceipt confirms each transaction as soon as it is read, before its
	// events are published: the negative control of the ack discipline (tests only).
	confirmOnReceipt bool

	slotQuery    sqlq.Statement[slotParams]    // cdc_slot.sql
	visibleQuery sqlq.Statement[visibleParams] // cdc_visible.sql
	// hasEventsQuery is cdc_has_events.sql (no parameters)
	hasEventsQuery sqlq.Statement[struct{}]

	mu    sync.Mutex
	state state

	// unstreamed, when set, has sessions read without streaming: the transaction whose
	// stream turned out ambiguous (errAmbiguousStream); unstreamedEnd is its end once a
	// session read it whole. Streaming resumes once that is confirmed and nothing is in
	// flight (a transaction that aborts whole is never read: streaming stays off until
	// the process restarts). Guarded by mu.
	unstreamed    uint32
	unstreamedEnd pglogrepl.LSN
}

// state is what the Source's two goroutines share: the reader (the replication
// connection) and the publisher (the relay's batches).
type state struct {
	confirmed, received pglogrepl.LSN
	inflight            int // transactions handed to the publisher and not yet settled
	stats               Stats
}

// Stats is what a Source has done and seen.
type Stats struct {
	// Transactions and Events count what it read from the WAL: committed transactions
	// that inserted or emitted events, and their events; Emitted those of them emitted
	// (table-less mode, outbox.Writer.Emit).
	Transactions, Events, Emitted int64
	// Published, Left: what [relay.Relay.PublishSeqs] and [relay.Relay.PublishEmitted]
	// did with them (Left: rows for the polling claims). Written counts the emitted
	// events written to the events table instead of published (relay.EmittedResult).
	Published, Left, Written int64
	// Refused counts the messages of the schema's prefix that were not the Writer's
	// (undecodable): logged at Error and skipped.
	Refused int64
	// ConfirmedLSN is what it confirmed to the server; ReceivedLSN the furthest it read;
	// ConfirmedAt when ConfirmedLSN last moved (zero: never).
	ConfirmedLSN, ReceivedLSN string
	ConfirmedAt               time.Time
	// WALStatus is the slot's wal_status (reserved, extended, unreserved, lost) at the
	// last look; RetainedBytes the WAL the slot keeps (the server's position minus its
	// restart_lsn); ConfirmedLag the server's position minus what the slot confirmed.
	WALStatus                   string
	RetainedBytes, ConfirmedLag int64
	// SlotCreated reports whether this Source created the slot; Streaming whether it
	// reads from it now.
	SlotCreated, Streaming bool
	// Sessions counts the replication sessions started; GapsSkipped the times the slot
	// was advanced past WAL written while its publication did not exist.
	Sessions, GapsSkipped int64
}

// New returns a Source for the relay r, reading the slot of r's schema on the server of
// pool (its connection settings, with replication=database, make the replication
// connection; the role needs the REPLICATION attribute, and to create the publication
// the first time, ownership of the events table).
func New(pool *pgxpool.Pool, r *relay.Relay, cfg *Config) (*Source, error) {
	if pool == nil || r == nil {
		return nil, errors.New("cdc: pool and relay are required")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	rc := r.Config()
	c.Slot = cmp.Or(c.Slot, emitted.DefaultSlot(rc.Schema))
	if err := validName(c.Slot); err != nil {
		return nil, fmt.Errorf("cdc config: Slot: %w", err)
	}
	c.StatusInterval = cmp.Or(c.StatusInterval, DefaultStatusInterval)
	c.RetryDelay = cmp.Or(c.RetryDelay, DefaultRetryDelay)
	c.MaxRetryDelay = cmp.Or(c.MaxRetryDelay, DefaultMaxRetryDelay)
	c.MaxPending = cmp.Or(c.MaxPending, DefaultMaxPending)
	if c.StatusInterval < 0 || c.RetryDelay < 0 || c.MaxRetryDelay < 0 || c.MaxPending < 0 {
		return nil, errors.New("cdc config: StatusInterval, RetryDelay, MaxRetryDelay and MaxPending must not be negative")
	}
	log := c.Logger
	if log == nil {
		log = rc.Logger
	}
	quoted, err := sqlq.QuoteSchema(rc.Schema)
	if err != nil {
		return nil, fmt.Errorf("cdc: the relay's schema: %w", err)
	}
	return &Source{
		pool: pool, relay: r, cfg: c, schema: rc.Schema, slotQuery: sqlq.Bind[slotParams]("cdc_slot", quoted),
		visibleQuery:   sqlq.Bind[visibleParams]("cdc_visible", quoted),
		hasEventsQuery: sqlq.Bind[struct{}]("cdc_has_events", quoted),
		log:            log.With(slog.String("schema", rc.Schema), slog.String("slot", c.Slot)),
	}, nil
}

// validName checks a slot (and publication) name: what PostgreSQL allows for a slot,
// so that it never needs quoting.
func validName(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("%q must be 1 to 63 bytes", name)
	}
	for _, r := range name {
		if r != '_' && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return fmt.Errorf("%q: only lowercase letters, digits and underscores are allowed", name)
		}
	}
	return nil
}

// Stats returns what the Source has done and seen so far.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state.stats
	st.ConfirmedLSN, st.ReceivedLSN = s.state.confirmed.String(), s.state.received.String()
	return st
}

// Run reads the slot until ctx is done, reconnecting with backoff when the connection
// fails or another reader holds the slot. It returns nil when ctx is done, and
// [ErrWALLevel] or [ErrSlotLost] (wrapped, naming what it found) when it cannot go on:
// the relay's polling claims go on publishing from the table meanwhile.
func (s *Source) Run(ctx context.Context) error {
	delay := s.cfg.RetryDelay
	for {
		started := time.Now()
		err := s.session(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrWALLevel), errors.Is(err, ErrSlotLost):
			s.log.ErrorContext(ctx, "change data capture stopped: the relay's polling publishes what is pending", slog.Any("error", err))
			return err
		case errors.Is(err, errSlotBusy):
			s.log.InfoContext(ctx, "replication slot held by another reader: waiting", slog.Duration("retry_in", delay))
		case errors.Is(err, errPublicationGap):
			s.skipGap(ctx, err)
		case errors.Is(err, errAmbiguousStream):
			var ae *ambiguousStreamError
			if errors.As(err, &ae) {
				s.mu.Lock()
				s.unstreamed, s.unstreamedEnd = ae.xid, 0
				s.mu.Unlock()
			}
			s.log.WarnContext(ctx, "reading the transaction again without streaming", slog.Any("error", err))
			continue // at once: nothing was confirmed past the transaction
		case errors.Is(err, errStreamAgain):
			continue
		default:
			s.log.WarnContext(ctx, "replication session ended", slog.Any("error", err), slog.Duration("retry_in", delay))
		}
		if time.Since(started) > s.cfg.MaxRetryDelay {
			delay = s.cfg.RetryDelay // it ran a while: start the backoff again
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, s.cfg.MaxRetryDelay)
	}
}

// session sets up the publication and slot, streams from the slot and hands the
// transactions to the publisher until ctx is done or something fails.
func (s *Source) session(ctx context.Context) error {
	if err := s.setUp(ctx); err != nil {
		return err
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
		s.awaitReleased(cctx)
	}()
	if err := s.ensureSlot(ctx, conn); err != nil {
		return err
	}
	streaming := "on"
	s.mu.Lock()
	if s.unstreamed != 0 {
		streaming = "off"
	}
	s.mu.Unlock()
	err = pglogrepl.StartReplication(ctx, conn, s.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '2'", "publication_names '" + s.cfg.Slot + "'", "streaming '" + streaming + "'", "messages 'true'",
		},
	})
	if err != nil {
		if isSlotBusy(err) {
			return errSlotBusy
		}
		return fmt.Errorf("cdc: start replication from slot %s: %w", s.cfg.Slot, err)
	}
	s.log.InfoContext(ctx, "change data capture started")
	s.mu.Lock()
	s.state.stats.Streaming = true
	s.state.stats.Sessions++
	s.state.inflight = 0 // what an earlier session handed on and did not settle is read again
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.state.stats.Streaming = false
		s.mu.Unlock()
	}()
	// What the stream will not bring is the polling claims' now, not at their interval:
	// what committed while a new slot was being created (before its consistent point), a
	// stretch the slot was advanced past, events a failed session left.
	s.relay.Wake()

	txns := make(chan *txn, 1024)
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.publish(pctx, txns) })
	defer func() { stop(); wg.Wait() }()
	return s.read(ctx, conn, txns)
}

// awaitReleased waits (until ctx is done) for the server to let go of the slot after the
// replication connection closed: its walsender ends a moment later, and until then the
// slot is active — a Run that returned would leave a slot nobody could drop or take.
func (s *Source) awaitReleased(ctx context.Context) {
	for {
		st, found, err := s.readSlot(ctx)
		if err != nil || !found || st.activePID == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// streamAgain reports whether a session read without streaming has confirmed the
// transaction that made it (unstreamed) with nothing else in flight, and forgets it
// then: the next session streams again.
func (s *Source) streamAgain() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unstreamed == 0 || s.unstreamedEnd == 0 || s.state.confirmed < s.unstreamedEnd || s.state.inflight != 0 {
		return false
	}
	s.unstreamed, s.unstreamedEnd = 0, 0
	return true
}

// connect opens the replication connection.
func (s *Source) connect(ctx context.Context) (*pgconn.PgConn, error) {
	cc := s.pool.Config().ConnConfig.Config.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("cdc: open the replication connection: %w", err)
	}
	return conn, nil
}

// read receives the stream: it decodes the transactions and hands them to the
// publisher in commit order, and tells the server what is confirmed every
// StatusInterval (and when asked).
func (s *Source) read(ctx context.Context, conn *pgconn.PgConn, txns chan<- *txn) error {
	d := newDecoder(s.schema)
	nextStatus := time.Now()
	for {
		if now := time.Now(); !now.Before(nextStatus) {
			if err := s.sendStatus(ctx, conn); err != nil {
				return err
			}
			if err := s.look(ctx); err != nil {
				return err
			}
			if s.streamAgain() {
				s.finalStatus(conn)
				return errStreamAgain
			}
			nextStatus = now.Add(s.cfg.StatusInterval)
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		raw, err := conn.ReceiveMessage(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			s.finalStatus(conn)
			return nil
		case pgconn.Timeout(err):
			continue
		case err != nil:
			return fmt.Errorf("cdc: receive: %w", err)
		}
		var data []byte
		switch m := raw.(type) {
		case *pgproto3.CopyData:
			data = m.Data
		case *pgproto3.ErrorResponse:
			err := pgconn.ErrorResponseToPgError(m)
			if m.Code == "42704" && strings.Contains(m.Message, "publication") {
				return fmt.Errorf("%w: %w", errPublicationGap, err)
			}
			return fmt.Errorf("cdc: replication stream: %w", err)
		default:
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return fmt.Errorf("cdc: %w", err)
			}
			s.idle(k.ServerWALEnd, d.busy())
			if k.ReplyRequested {
				nextStatus = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return fmt.Errorf("cdc: %w", err)
			}
			t, err := d.decode(x.WALData, func(err error) { s.refuse(ctx, err) })
			if err != nil {
				return fmt.Errorf("cdc: %w", err)
			}
			s.receivedUpTo(x.WALStart + pglogrepl.LSN(len(x.WALData)))
			if t != nil {
				if err := s.hand(ctx, conn, txns, t); err != nil {
					return err
				}
			}
		}
	}
}

// hand gives t to the publisher, waiting while MaxPending events are in flight, and
// telling the server meanwhile what is confirmed (so that it does not time the
// connection out while a slow batch runs).
func (s *Source) hand(ctx context.Context, conn *pgconn.PgConn, txns chan<- *txn, t *txn) error {
	s.mu.Lock()
	if s.unstreamed != 0 && t.xid == s.unstreamed {
		s.unstreamedEnd = t.end // read whole: streaming resumes once it is confirmed
	}
	if t.events() > 0 {
		s.state.stats.Transactions++
		s.state.stats.Events += int64(t.events())
		for _, it := range t.items {
			if it.ev != nil {
				s.state.stats.Emitted++
			}
		}
	}
	if t.events() == 0 && s.state.inflight == 0 {
		s.confirm(t.end) // nothing of it to settle
		s.mu.Unlock()
		return nil
	}
	if s.confirmOnReceipt {
		s.confirm(t.end) // the negative control: before the ack
	}
	s.state.inflight++
	s.mu.Unlock()
	tick := time.NewTicker(s.cfg.StatusInterval)
	defer tick.Stop()
	for {
		select {
		case txns <- t:
			return nil
		case <-tick.C:
			if err := s.sendStatus(ctx, conn); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// publish runs the relay's batches over what the reader hands it, taking every
// transaction waiting at once (up to MaxPending events), and confirms each group's end
// once every event of it is settled: the rows' through PublishSeqs (published and
// marked, dead, or left pending for the polling claims), the emitted events' through
// PublishEmitted (published, or written to the table). The group is handed on in runs of
// one kind, in commit order.
func (s *Source) publish(ctx context.Context, txns <-chan *txn) {
	var (
		items []item
		xids  []int64
	)
	for {
		var last *txn
		n := 0
		select {
		case <-ctx.Done():
			return
		case t := <-txns:
			items, xids, last, n = append(items[:0], t.items...), append(xids[:0], int64(t.xid)), t, 1
		}
	more:
		for len(items) < s.cfg.MaxPending {
			select {
			case t := <-txns:
				items, xids, last = append(items, t.items...), append(xids, int64(t.xid)), t
				n++
			default:
				break more
			}
		}
		var published, left, written int
		for run := range runs(items) {
			if run[0].ev != nil {
				res, ok := s.publishEmitted(ctx, run)
				if !ok {
					return // stopping: nothing more is confirmed; the next reader reads it again
				}
				published, written = published+res.Published, written+res.Written
				continue
			}
			seqs := make([]int64, len(run))
			for i, it := range run {
				seqs[i] = it.seq
			}
			err := s.awaitVisible(ctx, xids)
			var res relay.SeqsResult
			if err == nil {
				res, err = s.relay.PublishSeqs(ctx, seqs)
			}
			if ctx.Err() != nil {
				return // as above
			}
			if err != nil {
				// the rows stay pending in the table: the polling claims take them
				s.log.WarnContext(ctx, "publish by seq failed: left to the polling claims", slog.Any("error", err), slog.Int("events", len(seqs)))
				s.relay.Wake()
			}
			published, left = published+res.Published, left+res.Left
		}
		s.mu.Lock()
		s.state.inflight -= n
		s.confirm(last.end)
		s.state.stats.Published += int64(published)
		s.state.stats.Left += int64(left)
		s.state.stats.Written += int64(written)
		s.mu.Unlock()
	}
}

// runs yields items in runs of one kind (rows, emitted events), in order.
func runs(items []item) func(yield func([]item) bool) {
	return func(yield func([]item) bool) {
		for start := 0; start < len(items); {
			end := start + 1
			for end < len(items) && (items[end].ev != nil) == (items[start].ev != nil) {
				end++
			}
			if !yield(items[start:end]) {
				return
			}
			start = end
		}
	}
}

// publishEmitted hands a run of emitted events to the relay until each is published or
// written to the table: they exist nowhere else, so a failure (the database) is tried
// again, with backoff, and the position is not confirmed past them meanwhile. It
// returns false when ctx is done first.
func (s *Source) publishEmitted(ctx context.Context, run []item) (relay.EmittedResult, bool) {
	events := make([]relay.Emitted, len(run))
	for i, it := range run {
		events[i] = *it.ev
	}
	delay := s.cfg.RetryDelay
	for {
		res, err := s.relay.PublishEmitted(ctx, events)
		if ctx.Err() != nil {
			return res, false
		}
		if err == nil {
			return res, true
		}
		s.log.WarnContext(ctx, "emitted events neither published nor written: trying again", slog.Any("error", err),
			slog.Int("events", len(events)), slog.Duration("retry_in", delay))
		select {
		case <-ctx.Done():
			return res, false
		case <-time.After(delay):
		}
		delay = min(2*delay, s.cfg.MaxRetryDelay)
	}
}

// refuse logs and counts a message of the schema's prefix that is not the Writer's.
func (s *Source) refuse(ctx context.Context, err error) {
	s.log.ErrorContext(ctx, "emitted message refused: not an outbox Writer's; skipped", slog.Any("error", err))
	s.mu.Lock()
	s.state.stats.Refused++
	s.mu.Unlock()
}

// visibleWait bounds how long the publisher waits for committed transactions to become
// visible: past it, what the claims cannot see yet is the polling claims'.
const visibleWait = 5 * time.Second

// awaitVisible waits until the transactions xids are visible to a new snapshot
// (cdc_visible.sql): the WAL announces a commit a moment before the committing session
// is seen as done, and a claim that does not see the rows yet would leave them.
func (s *Source) awaitVisible(ctx context.Context, xids []int64) error {
	q := s.visibleQuery
	args := q.Args(&visibleParams{XIDs: xids})
	deadline := time.Now().Add(visibleWait)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var visible bool
		if err := s.pool.QueryRow(ctx, q.SQL, args...).Scan(&visible); err != nil {
			return fmt.Errorf("cdc: wait for the transactions to be visible: %w", err)
		}
		if visible || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// visibleParams holds cdc_visible.sql's parameter.
type visibleParams struct {
	XIDs []int64 `sql:"xids"`
}

// receivedUpTo records how far the reader read.
func (s *Source) receivedUpTo(lsn pglogrepl.LSN) {
	s.mu.Lock()
	s.state.received = max(s.state.received, lsn)
	s.mu.Unlock()
}

// idle records the server's WAL position of a keepalive: with nothing being read or in
// flight, everything up to it is settled (what the server sends up to there it has sent
// already), so it may be confirmed — an idle events table then does not pin the WAL
// that the rest of the cluster writes.
func (s *Source) idle(walEnd pglogrepl.LSN, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.received = max(s.state.received, walEnd)
	if !busy && s.state.inflight == 0 {
		s.confirm(walEnd)
	}
}

// confirm moves the confirmed position up to lsn; s.mu must be held.
func (s *Source) confirm(lsn pglogrepl.LSN) {
	if lsn > s.state.confirmed {
		s.state.confirmed, s.state.stats.ConfirmedAt = lsn, time.Now()
	}
}

// sendStatus tells the server what is confirmed: written, flushed and applied up to it.
func (s *Source) sendStatus(ctx context.Context, conn *pgconn.PgConn) error {
	s.mu.Lock()
	confirmed := s.state.confirmed
	s.mu.Unlock()
	if confirmed == 0 {
		return nil // nothing yet: the slot's own position stands
	}
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: confirmed}); err != nil {
		return fmt.Errorf("cdc: send standby status: %w", err)
	}
	return nil
}

// finalStatus sends the last status on the way out (best effort).
func (s *Source) finalStatus(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.sendStatus(ctx, conn)
}
