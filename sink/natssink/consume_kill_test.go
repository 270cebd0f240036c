package natssink_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/natssink"
)

// The roles the kill test runs as processes of their own (this test binary again, with
// OUTBOX_E2E_ROLE set): they run until they are killed.
const (
	roleEnv   = "OUTBOX_E2E_ROLE"
	dbEnv     = "OUTBOX_E2E_DB"
	natsEnv   = "OUTBOX_E2E_NATS"
	streamEnv = "OUTBOX_E2E_STREAM"
)

// TestE2ERole is not a test: it is the body of a relay or consumer process of
// TestSIGKILLedRelayAndConsumer, and skips when run as a test.
func TestE2ERole(t *testing.T) {
	role := os.Getenv(roleEnv)
	if role == "" {
		t.Skip("a child process of TestSIGKILLedRelayAndConsumer")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(dbEnv))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	nc, err := nats.Connect(os.Getenv(natsEnv), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	switch role {
	case "relay":
		sink, err := natssink.New(ctx, js, &natssink.Config{Stream: os.Getenv(streamEnv)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := relay.New(pool, sink, &relay.Config{PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		err = r.Run(ctx)
		t.Log(err)
	case "consumer":
		cons, err := js.Consumer(ctx, os.Getenv(streamEnv), "inventory")
		if err != nil {
			t.Fatal(err)
		}
		c, err := inbox.New(&inbox.Config{Name: "inventory"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := natssink.NewRunner(cons, pool, c, func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
			_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, aggregate_id, version) VALUES ($1, $2, $3)`, m.ID, m.AggregateID, m.AggregateVersion)
			return err
		}, &natssink.RunnerConfig{Workers: 8, RetryDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		err = r.Run(ctx)
		t.Log(err)
	}
}

// Producer (business row + Enqueue) → relay process → JetStream → consumer process →
// inbox: 5,000 events over 200 aggregates while the relay and the consumer are each
// killed with SIGKILL and restarted several times: every committed event's effect
// exactly once, per aggregate in version order, none lost.
func TestSIGKILLedRelayAndConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	t.Parallel()
	ctx := context.Background()
	url := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, url)
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (n bigserial, event_id uuid, aggregate_id text, version bigint);
		CREATE TABLE orders (id text PRIMARY KEY, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t)
	_, js := connect(t, srv.ClientURL())
	st := createStream(t, js, "outbox")
	stream := st.CachedInfo().Config.Name
	if _, err := st.CreateOrUpdateConsumer(ctx, jetstreamConsumerConfig("inventory")); err != nil {
		t.Fatal(err)
	}
	spawn := func(role string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestE2ERole$", "-test.count=1")
		cmd.Env = append(os.Environ(), roleEnv+"="+role, dbEnv+"="+url, natsEnv+"="+srv.ClientURL(), streamEnv+"="+stream)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	relayProc, consumerProc := spawn("relay"), spawn("consumer")
	t.Cleanup(func() { kill(relayProc); kill(consumerProc) })

	const aggregates, total = 200, 5000
	produced := make(chan error, 1)
	go func() {
		for i := range total {
			id, v := fmt.Sprintf("o-%d", i%aggregates), int64(i/aggregates+1)
			err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET version = excluded.version`, id, v); err != nil {
					return err
				}
				return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "order", AggregateID: id, AggregateVersion: v, EventType: "order.changed"})
			})
			if err != nil {
				produced <- err
				return
			}
		}
		produced <- nil
	}()
	effects := func() int { return countRows(t, pool, `SELECT count(*) FROM effects`) }
	for round := 1; round <= 3; round++ {
		at := effects()
		waitUntil(t, fmt.Sprintf("progress before kill %d", round), func() bool { return effects() >= at+total/8 })
		kill(relayProc)
		relayProc = spawn("relay")
		at = effects()
		waitUntil(t, fmt.Sprintf("progress before consumer kill %d", round), func() bool { return effects() >= min(at+total/8, total) })
		kill(consumerProc)
		consumerProc = spawn("consumer")
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every effect", func() bool { return effects() >= total })
	if n := countRows(t, pool, `SELECT count(DISTINCT event_id) FROM effects`); n != total || effects() != total {
		t.Fatalf("%d effects of %d distinct events, want %d of %d", effects(), n, total, total)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM (SELECT version, lag(version) OVER (PARTITION BY aggregate_id ORDER BY n) AS prev FROM effects) e
		WHERE version <> coalesce(prev, 0) + 1`); n != 0 {
		t.Fatalf("%d effects out of version order", n)
	}
}
