package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/examples/orders/internal/testenv"
	"github.com/outboxkit/outbox/examples/orders/inventory"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/natssink"
)

// newDB returns a pool on a fresh empty database, migrated by migrate.
func newDB(t *testing.T, migrate func(context.Context, *pgxpool.Pool) error) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.PoolFor(t, pgtest.ConnString(t, &pgtest.Options{Empty: true}))
	if err := migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// start runs run in a goroutine; the returned stop cancels it and checks it returned nil.
func start(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("run did not return within 30 s of its cancellation")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func stockOf(t *testing.T, pool *pgxpool.Pool, sku string) int {
	t.Helper()
	n, err := inventory.Stock(context.Background(), pool, sku)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func count(t *testing.T, pool *pgxpool.Pool, q string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// placeOrder POSTs an order to the API at base and checks it was created.
func placeOrder(t *testing.T, base, sku string, quantity int) {
	t.Helper()
	body := fmt.Sprintf(`{"customer": "ada", "sku": %q, "quantity": %d}`, sku, quantity)
	resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST %s: %s, want 201", body, resp.Status)
	}
}

// POST /orders ×N → orders.Run (order + event in one transaction, relay) → JetStream →
// inventory.Run (natssink Runner → inbox) on a database of its own: the stock ends at
// what the orders took. Then one message is published to the stream again (a new
// Nats-Msg-Id, so the stream stores it): the consumer gets it, the inbox finds it a
// duplicate, and the stock does not move.
func TestOrdersToInventory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	producerDB := newDB(t, orders.Migrate)
	consumerDB := newDB(t, inventory.Migrate)
	const initial = 1000
	for _, sku := range []string{"widget", "gadget"} {
		if err := inventory.Seed(ctx, consumerDB, sku, initial); err != nil {
			t.Fatal(err)
		}
	}
	url, js := testenv.NATS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	stopOrders := start(t, func(ctx context.Context) error {
		return orders.Run(ctx, orders.RunConfig{Pool: producerDB, JetStream: js, Listener: ln, Relay: &relay.Config{PollInterval: 50 * time.Millisecond}})
	})
	stopInventory := start(t, func(ctx context.Context) error {
		return inventory.Run(ctx, inventory.RunConfig{Pool: consumerDB, JetStream: testenv.Connect(t, url), Runner: &natssink.RunnerConfig{RetryDelay: 50 * time.Millisecond}})
	})

	const clients, perClient = 6, 10
	want := map[string]int{"widget": initial, "gadget": initial}
	var wg sync.WaitGroup
	var mu sync.Mutex
	began := time.Now()
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				sku, quantity := []string{"widget", "gadget"}[(c+i)%2], 1+(c*perClient+i)%3
				placeOrder(t, base, sku, quantity)
				mu.Lock()
				want[sku] -= quantity
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("stock %v", want), func() bool {
		return stockOf(t, consumerDB, "widget") == want["widget"] && stockOf(t, consumerDB, "gadget") == want["gadget"]
	})
	const total = clients * perClient
	t.Logf("%d orders from %d HTTP clients: stock applied %s after the first POST", total, clients, time.Since(began))
	if n := count(t, consumerDB, `SELECT count(*) FROM outbox.inbox WHERE consumer = 'inventory'`); n != total {
		t.Fatalf("%d events in the inbox, want %d", n, total)
	}

	// A duplicate delivery: the first message again, stored anew by the stream.
	st, err := js.Stream(ctx, orders.Stream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	again := &nats.Msg{Subject: raw.Subject, Header: nats.Header{}, Data: raw.Data}
	for name, values := range raw.Header {
		if name != jetstream.MsgIDHeader {
			again.Header[name] = values
		}
	}
	ack, err := js.PublishMsg(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatal("the stream dropped the republished message as a duplicate; the test needs it delivered")
	}
	cons, err := js.Consumer(ctx, orders.Stream, inventory.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the consumer to ack the republished message", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.AckFloor.Stream >= ack.Sequence && info.NumAckPending == 0
	})
	if w, g := stockOf(t, consumerDB, "widget"), stockOf(t, consumerDB, "gadget"); w != want["widget"] || g != want["gadget"] {
		t.Fatalf("after the duplicate delivery: widget %d, gadget %d; want %d and %d (unchanged)", w, g, want["widget"], want["gadget"])
	}
	if n := count(t, consumerDB, `SELECT count(*) FROM outbox.inbox WHERE consumer = 'inventory'`); n != total {
		t.Fatalf("%d events in the inbox after the duplicate, want %d", n, total)
	}
	// One more order, timed from its POST to its effect on the consumer's database.
	began = time.Now()
	placeOrder(t, base, "widget", 1)
	testenv.WaitFor(t, time.Minute, "the last order's effect", func() bool { return stockOf(t, consumerDB, "widget") == want["widget"]-1 })
	t.Logf("one order: POST to stock applied in %s", time.Since(began))
	stopOrders()
	stopInventory()
	if n := count(t, producerDB, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`); n != 0 {
		t.Fatalf("%d events not published", n)
	}
}
