package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// Bad configuration is refused by New with an error naming the field.
func TestConfigValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  *inbox.Config
		want string
	}{
		{nil, "Config.Name"},
		{&inbox.Config{}, "Config.Name"},
		{&inbox.Config{Name: "bill ing"}, "Config.Name"},
		{&inbox.Config{Name: "billing'; DROP TABLE x; --"}, "Config.Name"},
		{&inbox.Config{Name: "bill\x00ing"}, "Config.Name"},
		{&inbox.Config{Name: strings.Repeat("a", 201)}, "Config.Name"},
		{&inbox.Config{Name: "billing", Schema: `x"; DROP`}, "Config.Schema"},
		{&inbox.Config{Name: "billing", Gap: 7}, "Config.Gap"},
		{&inbox.Config{Name: "billing", FirstVersion: -1}, "Config.FirstVersion"},
		{&inbox.Config{Name: "billing", Accept: []inbox.Schema{{EventType: "a", SchemaVersion: 1}, {SchemaVersion: 1}}}, "Config.Accept[1].EventType"},
		{&inbox.Config{Name: "billing", Accept: []inbox.Schema{{EventType: "a"}}}, "Config.Accept[0].SchemaVersion"},
	} {
		_, err := inbox.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := inbox.New(&inbox.Config{Name: "billing.v2:eu-west_1"}); err != nil {
		t.Fatalf("a good name refused: %v", err)
	}
}

// Hostile arguments and messages give an error naming what is wrong, and record nothing.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, nil)
	if _, err := c.Process(ctx, nil, msg("o-1", 0), effect); err == nil || !strings.Contains(err.Error(), "db is nil") {
		t.Errorf("nil db: %v", err)
	}
	if _, err := c.Process(ctx, pool, msg("o-1", 0), nil); err == nil || !strings.Contains(err.Error(), "handler is nil") {
		t.Errorf("nil handler: %v", err)
	}
	if _, err := inbox.Process(ctx, pool, "", msg("o-1", 0), effect); err == nil || !strings.Contains(err.Error(), "consumer is empty") {
		t.Errorf("empty consumer: %v", err)
	}
	if _, err := inbox.Process(ctx, pool, "a b", msg("o-1", 0), effect); err == nil || !strings.Contains(err.Error(), "consumer") {
		t.Errorf("bad consumer: %v", err)
	}
	for _, tc := range []struct {
		edit  func(*outbox.Message)
		field string
	}{
		{func(m *outbox.Message) { m.ID = uuid.Nil }, "msg.ID"},
		{func(m *outbox.Message) { m.AggregateVersion = -1 }, "msg.AggregateVersion"},
		{func(m *outbox.Message) { m.EventType = "" }, "msg.EventType"},
		{func(m *outbox.Message) { m.AggregateType = ""; m.AggregateVersion = 3 }, "msg.AggregateType"},
		{func(m *outbox.Message) { m.AggregateID = "o\x00-1" }, "msg.AggregateID"},
		{func(m *outbox.Message) { m.EventType = "bad\xffutf8" }, "msg.EventType"},
		{func(m *outbox.Message) { m.Headers = map[string]string{"x-id": "a\x00b"} }, "msg.Headers[x-id]"},
		{func(m *outbox.Message) { m.Headers = map[string]string{"\xff": "v"} }, "msg.Headers"},
		{func(m *outbox.Message) { m.TraceParent = "\x00" }, "msg.TraceParent"},
	} {
		m := msg("o-1", 1)
		tc.edit(&m)
		_, err := c.Process(ctx, pool, m, effect)
		if !errors.Is(err, inbox.ErrInvalidMessage) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("message with a bad %s: %v", tc.field, err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.inbox`); n != 0 {
		t.Fatalf("%d dedup rows from refused input", n)
	}
	if _, err := c.Quarantined(ctx, pool, &inbox.ListOptions{Limit: -1}); err == nil || !strings.Contains(err.Error(), "ListOptions.Limit") {
		t.Errorf("bad limit: %v", err)
	}
	if _, err := c.Purge(ctx, pool, inbox.PurgeOptions{}); err == nil || !strings.Contains(err.Error(), "PurgeOptions.OlderThan") {
		t.Errorf("no OlderThan: %v", err)
	}
	if _, err := c.Purge(ctx, pool, inbox.PurgeOptions{OlderThan: time.Hour, BatchSize: -5}); err == nil || !strings.Contains(err.Error(), "PurgeOptions.BatchSize") {
		t.Errorf("bad batch size: %v", err)
	}
	if _, err := c.Replay(ctx, pool, uuid.New(), nil); err == nil || !strings.Contains(err.Error(), "handler is nil") {
		t.Errorf("replay with a nil handler: %v", err)
	}
	// A message with awkward but legal text goes through and round-trips through the park.
	m := msg(`o'1"; DROP TABLE effects; --`, 2)
	m.Headers = map[string]string{"x-q": `"\u0000 is not a NUL`}
	wantOutcome(t, process(t, c, pool, m), inbox.Parked)
	res := process(t, c, pool, msg(`o'1"; DROP TABLE effects; --`, 1))
	if len(res.Unparked) != 1 || res.Unparked[0] != m.ID {
		t.Fatalf("%+v", res)
	}
}

// Handler work that aborts the transaction (a failed statement) is a handler error:
// returned, nothing recorded.
func TestHandlerStatementError(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, nil)
	_, err := c.Process(context.Background(), pool, msg("o-1", 1), func(ctx context.Context, tx pgx.Tx, _ outbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO no_such_table VALUES (1)`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("err = %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.inbox`); n != 0 {
		t.Fatalf("%d dedup rows", n)
	}
}
