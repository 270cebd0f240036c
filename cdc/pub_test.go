package cdc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Schema and publication changes mid-stream (TESTPLAN #63): a column added to the events
// table (a new Relation message), and the publication dropped and created again while
// the Source reads — PostgreSQL 15's pgoutput then fails on the WAL written without it at
// every start ("publication does not exist"); the Source advances the slot past it, the
// relay's polling publishes that stretch's events, and change data capture goes on.
// Every event is published, in order. Without the skip the Source never streams again.
func TestSchemaAndPublicationChanges(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, relay.Ordered)
	slot := slotName(t, pool)
	s := newSource(t, pool, r, slot)
	startSource(t, pool, s)
	ctx := t.Context()
	write(t, pool, ids("a", 5), 1, 1)
	waitDelivered(t, sink, 5, 30*time.Second)
	if _, err := pool.Exec(ctx, `ALTER TABLE outbox.events ADD COLUMN tenant text`); err != nil {
		t.Fatal(err)
	}
	write(t, pool, ids("a", 5), 2, 1)
	waitDelivered(t, sink, 10, 30*time.Second)
	waitUntil(t, 10*time.Second, "the 10 published by change data capture", func() bool { return s.Stats().Published == 10 })

	if _, err := pool.Exec(ctx, `DROP PUBLICATION `+slot); err != nil {
		t.Fatal(err)
	}
	write(t, pool, ids("a", 5), 3, 1) // while there is no publication
	if _, err := pool.Exec(ctx, `CREATE PUBLICATION `+slot+` FOR TABLE outbox.events WITH (publish = 'insert')`); err != nil {
		t.Fatal(err)
	}
	write(t, pool, ids("a", 5), 4, 1)
	waitDelivered(t, sink, 20, 30*time.Second)
	waitUntil(t, 30*time.Second, "the slot advanced past the stretch", func() bool { return s.Stats().GapsSkipped > 0 })
	// streaming steadily again: a session that has lasted a second
	waitUntil(t, 30*time.Second, "the Source streams again", func() bool {
		st := s.Stats()
		time.Sleep(time.Second)
		now := s.Stats()
		return st.Streaming && now.Streaming && st.Sessions == now.Sessions
	})
	before := s.Stats().Published
	write(t, pool, ids("a", 5), 5, 1)
	msgs := waitDelivered(t, sink, 25, 30*time.Second)
	checkOrder(t, msgs)
	waitUntil(t, 10*time.Second, "the last 5 published by change data capture", func() bool { return s.Stats().Published >= before+5 })
}

// A publication of the slot's name that does not publish the schema's events table (the
// schema dropped and migrated again) is refused by name, not streamed from in silence.
func TestStalePublicationIsRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	r, err := relay.New(pool, &memsink.Sink{}, &relay.Config{Logger: testLogger}) // not run: the Source only sets up
	if err != nil {
		t.Fatal(err)
	}
	slot := slotName(t, pool)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE other (x int); CREATE PUBLICATION `+slot+` FOR TABLE other`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP PUBLICATION IF EXISTS `+slot) })
	s := newSource(t, pool, r, slot)
	err = s.session(t.Context())
	if err == nil || !strings.Contains(err.Error(), "does not publish outbox.events") {
		t.Fatalf("session = %v, want the stale publication named", err)
	}
}
