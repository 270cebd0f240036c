package relay

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// Wakeup says how an idle relay learns that events are waiting.
type Wakeup string

const (
	// WakeupListen makes the relay hold one dedicated connection that LISTENs on
	// [outbox.WakeupChannel] for the wake-ups sent by [outbox.Notifier] (after commit,
	// outside the business transactions) or by the opt-in trigger
	// ([InstallNotifyTrigger]), and still polls every FallbackPollInterval to cover
	// lost wake-ups (every PollInterval while the listener reconnects). At start a
	// self-test sends itself a notification; when none arrives (a transaction-pooling
	// PgBouncer swallows LISTEN) the relay logs a warning and polls every PollInterval.
	// The default.
	WakeupListen Wakeup = "listen"
	// WakeupPoll makes the relay only poll, every PollInterval; no dedicated connection.
	WakeupPoll Wakeup = "poll"
)

const (
	// listenerAppName is the listener connection's application_name unless the pool's
	// configuration sets one: it finds the connection in pg_stat_activity.
	listenerAppName = "outbox-relay-listener"
	// defaultSelfTestTimeout is how long the self-test waits for its own notification.
	defaultSelfTestTimeout = 2 * time.Second
	// listenerConnectTimeout bounds one connect + LISTEN.
	listenerConnectTimeout = 10 * time.Second
	listenerMinBackoff     = 100 * time.Millisecond
	listenerMaxBackoff     = 10 * time.Second
)

// selfTestState is the outcome of the listener's start-up self-test.
type selfTestState int32

const (
	selfTestPending selfTestState = iota // not concluded yet
	selfTestPassed                       // notifications arrive: the listener is listening
	selfTestFailed                       // they do not: the listener gave up, the relay polls
)

// listener turns notifications on the schema's wake-up channel into calls of notified.
// It holds one dedicated connection (not from the pool: LISTEN is per session, and a
// pooled session goes back to the pool) and never polls: between notifications it
// sends nothing to the server. After every (re)connect it calls wake once, because an
// event may have committed while nothing was listening. It reconnects with backoff
// when its connection breaks, for as long as run's ctx lasts.
type listener struct {
	pool      *pgxpool.Pool
	channel   string
	listenSQL string
	notify    sqlq.Statement[sqlq.NotifyParams]
	wake      func()               // after every (re)connect: anything may have been missed
	notified  func(payload string) // for every notification
	log       *slog.Logger

	selfTestTimeout        time.Duration
	minBackoff, maxBackoff time.Duration
	// selfTestNotify sends the self-test's notification with payload; by default
	// through the pool, i.e. on another session than the listener's. Tests replace it.
	selfTestNotify func(ctx context.Context, payload string) error
	// beforeConnect, when set (tests only), runs before every connection attempt.
	beforeConnect func(ctx context.Context)

	selfTest      atomic.Int32 // a selfTestState
	listening     atomic.Bool  // connected, LISTENing, and the self-test passed
	connects      atomic.Int64 // connections that reached LISTEN (and passed the self-test)
	notifications atomic.Int64 // notifications received, the self-test's own excluded
}

// newListener returns a listener for schema (already validated) that calls notified
// with the payload of every notification, and wake after every (re)connect; start it
// with run. A relay passes r.Wake and r.notified.
func newListener(pool *pgxpool.Pool, schema string, wake func(), notified func(payload string), log *slog.Logger) *listener {
	channel := outbox.WakeupChannel(schema)
	l := &listener{
		pool:    pool,
		channel: channel,
		// LISTEN takes an identifier, not a parameter; the channel is made of the
		// validated schema name and is quoted anyway.
		listenSQL:       "LISTEN " + pgx.Identifier{channel}.Sanitize(),
		notify:          sqlq.Bind[sqlq.NotifyParams]("notify", ""),
		wake:            wake,
		notified:        notified,
		log:             log.With(slog.String("channel", channel)),
		selfTestTimeout: defaultSelfTestTimeout,
		minBackoff:      listenerMinBackoff,
		maxBackoff:      listenerMaxBackoff,
	}
	l.selfTestNotify = func(ctx context.Context, payload string) error {
		_, err := l.pool.Exec(ctx, l.notify.SQL, l.notify.Args(&sqlq.NotifyParams{Channel: l.channel, Payload: payload})...)
		return err
	}
	return l
}

// isListening reports whether notifications reach the relay right now.
func (l *listener) isListening() bool { return l != nil && l.listening.Load() }

// selfTestResult reports the self-test's outcome so far.
func (l *listener) selfTestResult() selfTestState { return selfTestState(l.selfTest.Load()) }

// run listens until ctx is done, or until the self-test finds that notifications do not
// arrive: then it logs a warning and returns, leaving the relay to its polling.
func (l *listener) run(ctx context.Context) {
	l.selfTest.Store(int32(selfTestPending))
	var (
		backoff  time.Duration // wait before the next attempt
		failures int           // failed attempts in a row
		lost     bool          // a connection was lost: the next success is a reconnect
	)
	for {
		if backoff > 0 && wait(ctx, backoff/2+rand.N(backoff/2+1), nil) { //nolint:gosec // jitter, not security
			return
		}
		if ctx.Err() != nil {
			return
		}
		if l.beforeConnect != nil {
			l.beforeConnect(ctx)
		}
		conn, giveUp, err := l.establish(ctx)
		if giveUp {
			l.log.WarnContext(ctx, "wake-up listener: self-test notification never arrived (a transaction-pooling PgBouncer?); falling back to polling",
				slog.Duration("timeout", l.selfTestTimeout))
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			backoff = min(max(2*backoff, l.minBackoff), l.maxBackoff)
			level := slog.LevelDebug
			if failures == 1 {
				level = slog.LevelWarn
			}
			l.log.Log(ctx, level, "wake-up listener cannot listen; retrying", slog.Any("error", err),
				slog.Int("attempt", failures), slog.Duration("backoff", backoff))
			continue
		}
		l.connects.Add(1)
		if lost || failures > 0 {
			l.log.InfoContext(ctx, "wake-up listener listening again", slog.Int("attempt", failures+1))
		}
		failures, lost = 0, true
		l.listening.Store(l.selfTestResult() == selfTestPassed)
		l.wake() // an event may have committed while nothing was listening
		err = l.listen(ctx, conn)
		l.listening.Store(false)
		l.closeConn(conn)
		if ctx.Err() != nil {
			return
		}
		l.log.WarnContext(ctx, "wake-up listener lost its connection; reconnecting", slog.Any("error", err))
		backoff = l.minBackoff
	}
}

// establish connects and LISTENs and, the first time, runs the self-test; giveUp
// reports that the self-test failed (its state is then selfTestFailed).
func (l *listener) establish(ctx context.Context) (conn *pgx.Conn, giveUp bool, err error) {
	conn, err = l.connect(ctx)
	if err != nil || l.selfTestResult() != selfTestPending {
		return conn, false, err
	}
	ok, err := l.runSelfTest(ctx, conn)
	switch {
	case err != nil:
		l.closeConn(conn)
		return nil, false, err
	case !ok:
		l.closeConn(conn)
		l.selfTest.Store(int32(selfTestFailed))
		return nil, true, nil
	}
	l.selfTest.Store(int32(selfTestPassed))
	return conn, false, nil
}

// connect opens the dedicated connection, configured like the pool's, and LISTENs.
func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, listenerConnectTimeout)
	defer cancel()
	pcfg := l.pool.Config()
	cfg := pcfg.ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = listenerAppName
	}
	// pgx hands notifications to WaitForNotification only when no OnNotification
	// handler (which the pool's configuration could carry) takes them first.
	cfg.OnNotification = nil
	if pcfg.BeforeConnect != nil { // e.g. a fresh IAM token as password
		if err := pcfg.BeforeConnect(ctx, cfg); err != nil {
			return nil, fmt.Errorf("listener connect: pool BeforeConnect: %w", err)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("listener connect: %w", err)
	}
	if _, err := conn.Exec(ctx, l.listenSQL); err != nil {
		l.closeConn(conn)
		return nil, fmt.Errorf("listener: %s: %w", l.listenSQL, err)
	}
	return conn, nil
}

// runSelfTest sends a notification with a unique payload on another session and waits
// for it on conn. It returns false when the notification was sent but did not arrive
// within selfTestTimeout, and an error when the test could not be run (the notify
// failed, the connection broke): inconclusive, to be tried again.
func (l *listener) runSelfTest(ctx context.Context, conn *pgx.Conn) (bool, error) {
	token := "selftest-" + uuid.NewString()
	nctx, ncancel := context.WithTimeout(ctx, l.selfTestTimeout)
	err := l.selfTestNotify(nctx, token)
	ncancel()
	if err != nil {
		return false, fmt.Errorf("listener self-test: notify: %w", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, l.selfTestTimeout)
	defer wcancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return false, ctx.Err()
		case err != nil && wctx.Err() != nil:
			return false, nil // sent, never arrived
		case err != nil:
			return false, fmt.Errorf("listener self-test: wait for notification: %w", err)
		case n.Payload == token:
			return true, nil
		default: // a real wake-up arrived meanwhile
			l.notifications.Add(1)
			l.notified(n.Payload)
		}
	}
}

// listen calls notified for every notification on conn until conn breaks or ctx is
// done. It blocks in WaitForNotification: no query is sent while idle.
func (l *listener) listen(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("listener: wait for notification: %w", err)
		}
		l.notifications.Add(1)
		l.notified(n.Payload)
	}
}

// leaseReleasedPayload is the payload of the notification a relay sends when it
// releases leases (lease_release.sql) or joins the relays of its schema (its first
// heartbeat, lease_beat.sql): the others' lease rounds run at once.
const leaseReleasedPayload = "lease"

func (l *listener) closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
