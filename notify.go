package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/internal/slogdefault"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// wakeupChannelPrefix starts every wake-up channel name.
const wakeupChannelPrefix = "outbox_wakeup_"

// maxChannelBytes is the longest channel name PostgreSQL accepts (NAMEDATALEN - 1):
// pg_notify refuses longer names and LISTEN truncates them.
const maxChannelBytes = 63

// WakeupChannel returns the name of the PostgreSQL notification channel on which relays
// of schema listen for wake-ups: "outbox_wakeup_" + schema, cut to 63 bytes (the longest
// channel name PostgreSQL accepts), e.g. "outbox_wakeup_outbox". [Notifier] and the
// opt-in trigger (relay.InstallNotifyTrigger) notify it.
//
// Schema names are validated (lowercase letters, digits and underscores) before they
// reach this function in the library, so the channel is a plain identifier. Two
// schemas whose names share their first 49 bytes share a channel; that only costs
// their relays a spurious wake-up now and then.
func WakeupChannel(schema string) string {
	ch := wakeupChannelPrefix + schema
	if len(ch) > maxChannelBytes {
		ch = ch[:maxChannelBytes]
	}
	return ch
}

// DefaultNotifyMinInterval is the default NotifierConfig.MinInterval.
const DefaultNotifyMinInterval = 5 * time.Millisecond

// notifyTimeout bounds one pg_notify round trip.
const notifyTimeout = 5 * time.Second

// Execer runs one statement in autocommit: *pgxpool.Pool (the intended use) and
// *pgx.Conn are Execers.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// NotifierConfig configures a [Notifier]. The zero value (or nil) means the defaults.
type NotifierConfig struct {
	// Schema is the outbox schema whose relays are woken. Default "outbox".
	Schema string
	// MinInterval is the coalescing window: a Notifier sends at most one notification
	// per MinInterval, however many commits ask for one. Default
	// [DefaultNotifyMinInterval] (5ms), which caps a busy service at 200 notifies/s
	// and delays a wake-up by at most 5ms.
	MinInterval time.Duration
	// Logger receives a warning when notifying fails (once per run of failures) and a
	// note when it works again. Default: slog.Default() at Warn and above.
	Logger *slog.Logger
}

// Notifier wakes the relays of a schema after commits without putting NOTIFY inside the
// committing transactions. PostgreSQL serialises the commits of every transaction that
// issued NOTIFY behind one global lock; a Notifier instead sends the notification from
// its own goroutine, in autocommit on the pool, after the business transaction has
// committed, and coalesces: a burst of a thousand commits costs a handful of notifies.
//
// Pass its AfterCommit method to [WithTx]:
//
//	n, err := outbox.NewNotifier(pool, nil)
//	...
//	defer n.Close()
//	err = outbox.WithTx(ctx, pool, fn, n.AfterCommit)
//
// A lost wake-up (a Notifier that could not reach the database, a process that died
// right after its commit) only delays delivery until the relay's next poll. A Notifier
// is safe for concurrent use; create one per pool and schema, and Close it on shutdown.
type Notifier struct {
	db          Execer
	channel     string
	notify      sqlq.Statement[sqlq.NotifyParams]
	minInterval time.Duration
	log         *slog.Logger

	requests  chan struct{} // one pending wake-up request at most: requests coalesce
	stats     struct{ requests, sent, failed atomic.Int64 }
	closing   chan struct{}
	exited    chan struct{}
	closeOnce sync.Once
}

// NewNotifier returns a Notifier sending wake-ups through db (a pool, normally) and
// starts its goroutine; stop it with [Notifier.Close]. cfg nil means the defaults.
func NewNotifier(db Execer, cfg *NotifierConfig) (*Notifier, error) {
	if db == nil {
		return nil, errors.New("notifier: db is nil")
	}
	if cfg == nil {
		cfg = &NotifierConfig{}
	}
	schema := sqlq.DefaultSchema
	if cfg.Schema != "" {
		schema = cfg.Schema
	}
	_, err := sqlq.QuoteSchema(schema) // validated: it names the channel
	if err != nil {
		return nil, fmt.Errorf("NotifierConfig.Schema: %w", err)
	}
	minInterval := DefaultNotifyMinInterval
	switch {
	case cfg.MinInterval < 0:
		return nil, fmt.Errorf("NotifierConfig.MinInterval must not be negative, got %s", cfg.MinInterval)
	case cfg.MinInterval > 0:
		minInterval = cfg.MinInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slogdefault.Logger()
	}
	n := &Notifier{
		db:          db,
		channel:     WakeupChannel(schema),
		notify:      sqlq.Bind[sqlq.NotifyParams]("notify", ""),
		minInterval: minInterval,
		log:         log,
		requests:    make(chan struct{}, 1),
		closing:     make(chan struct{}),
		exited:      make(chan struct{}),
	}
	go n.loop()
	return n, nil
}

// AfterCommit asks for a wake-up of the relays. It never blocks and never fails: the
// notification is sent from the Notifier's goroutine, at once when none was sent in the
// last MinInterval, else at the end of that window, together with every other request
// made in it. Its signature is [AfterCommitFunc], so n.AfterCommit can be passed to
// [WithTx]; with database/sql or a hand-rolled transaction, call it after Commit
// returned nil. ctx is not used: the wake-up outlives the caller's request.
func (n *Notifier) AfterCommit(context.Context) {
	n.stats.requests.Add(1)
	select {
	case n.requests <- struct{}{}:
	default: // a request is already pending; it covers this commit too
	}
}

// NotifierStats counts what a [Notifier] did since it was created.
type NotifierStats struct {
	// Requests counts AfterCommit calls.
	Requests int64
	// Sent counts notifications sent: requests coalesce, so a busy service sends far
	// fewer than it requests.
	Sent int64
	// Failed counts notifications that failed (the relays then wait for their poll).
	Failed int64
}

// Stats returns the Notifier's counters.
func (n *Notifier) Stats() NotifierStats {
	return NotifierStats{Requests: n.stats.requests.Load(), Sent: n.stats.sent.Load(), Failed: n.stats.failed.Load()}
}

// Close stops the Notifier's goroutine and waits for it. A wake-up still pending is sent
// first (bounded by a 5s timeout), so the last commits are not left to the relay's
// fallback poll. AfterCommit after Close does nothing. Close is idempotent.
func (n *Notifier) Close() {
	n.closeOnce.Do(func() { close(n.closing) })
	<-n.exited
}

// loop sends one notification per request, then waits out the coalescing window, in
// which requests pile up into one: sends start at least minInterval apart. A request
// taken from the channel is always followed by a notification started after it, so the
// last commit of a burst is always followed by one.
func (n *Notifier) loop() {
	defer close(n.exited)
	window := time.NewTimer(n.minInterval)
	window.Stop()
	failing := false
	for {
		select {
		case <-n.closing: // checked first: closing wins over a stream of requests
			n.flush(&failing)
			return
		default:
		}
		select {
		case <-n.requests:
		case <-n.closing:
			n.flush(&failing)
			return
		}
		// The window opens as the send starts, not when it returns: a commit made
		// during a send then waits out what is left of the window, not a whole one
		// after the round trip.
		window.Reset(n.minInterval)
		n.send(&failing)
		select {
		case <-window.C:
		case <-n.closing:
			window.Stop()
		}
	}
}

// flush sends a pending request, if any, when the Notifier closes.
func (n *Notifier) flush(failing *bool) {
	select {
	case <-n.requests:
		n.send(failing)
	default:
	}
}

// send runs one pg_notify; failing tracks a run of failures so it logs once per run.
func (n *Notifier) send(failing *bool) {
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	_, err := n.db.Exec(ctx, n.notify.SQL, n.notify.Args(&sqlq.NotifyParams{Channel: n.channel})...)
	if err != nil {
		n.stats.failed.Add(1)
	} else {
		n.stats.sent.Add(1)
	}
	switch {
	case err != nil && !*failing:
		*failing = true
		n.log.Warn("outbox notifier: wake-up notify failed; relays will find the events at their next poll",
			slog.String("channel", n.channel), slog.Any("error", fmt.Errorf("notify: %w", err)))
	case err == nil && *failing:
		*failing = false
		n.log.Info("outbox notifier: wake-up notify works again", slog.String("channel", n.channel))
	}
}
