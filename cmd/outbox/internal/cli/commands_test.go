package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
	"github.com/outboxkit/outbox/internal/pgtest"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	dsn := withPassword(t, pgtest.ConnString(t, &pgtest.Options{Empty: true}))
	env := []string{"OUTBOX_DATABASE_URL=" + dsn}
	r := run(t, env, "migrate", "status")
	if r.code != cli.ExitNotMigrated || !strings.Contains(r.stdout, "version 0, latest") {
		t.Fatalf("migrate status on an empty database: want exit %d and version 0\n%s", cli.ExitNotMigrated, r)
	}
	if r = run(t, env, "migrate", "up"); r.code != 0 || !strings.Contains(r.stdout, "migrated to version") {
		t.Fatalf("migrate up:\n%s", r)
	}
	if r = run(t, env, "migrate"); r.code != 0 || !strings.Contains(r.stdout, "up to date") {
		t.Fatalf("migrate again:\n%s", r)
	}
	if r = run(t, env, "migrate", "status"); r.code != 0 {
		t.Fatalf("migrate status after up:\n%s", r)
	}
	if r = run(t, nil, "migrate", "sql", "--schema", "billing"); r.code != 0 || !strings.Contains(r.stdout, `CREATE TABLE "billing".events`) {
		t.Fatalf("migrate sql --schema billing:\n%s", r)
	}
}

func TestStatusMatchesTheDatabase(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	insert(t, pool, "order.created", "order", 6, 2, time.Hour)  // 3 aggregates
	insert(t, pool, "user.renamed", "user", 4, 1, time.Minute)  // 4 aggregates
	insert(t, pool, "order.paid", "invoice", 3, 3, time.Second) // 1 aggregate
	// Two dead letters of one aggregate (a blocked aggregate), one published, one discarded.
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET dead_at = now(), attempts = 10, last_error = 'boom'
		WHERE aggregate_type = 'user' AND aggregate_id IN ('0')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET published_at = now() WHERE aggregate_type = 'user' AND aggregate_id = '1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET dead_at = now(), discarded_at = now() WHERE aggregate_type = 'user' AND aggregate_id = '2'`); err != nil {
		t.Fatal(err)
	}
	r := run(t, []string{"OUTBOX_DATABASE_URL=" + dsn}, "status", "--json")
	if r.code != 0 {
		t.Fatalf("status --json:\n%s", r)
	}
	var st cli.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, r)
	}
	want := func(what string, got, want int64) {
		t.Helper()
		if got != want {
			t.Errorf("%s: status says %d, the database %d", what, got, want)
		}
	}
	want("pending", st.Pending, scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL`))
	want("dead", st.Dead, scalar[int64](t, pool, `SELECT count(*) FROM outbox.dead_letters`))
	want("blocked", st.BlockedAggregates, scalar[int64](t, pool, `SELECT count(DISTINCT (aggregate_type, aggregate_id)) FROM outbox.dead_letters`))
	oldest := scalar[float64](t, pool, `SELECT extract(epoch FROM now() - min(created_at))::float8 FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL`)
	if d := st.OldestPendingSeconds - oldest; d < -1 || d > 1 {
		t.Errorf("oldest pending age: status says %.1fs, the database %.1fs", st.OldestPendingSeconds, oldest)
	}
	if st.Pending != 6+1+3 || st.Dead != 1 || st.BlockedAggregates != 1 {
		t.Errorf("the scenario: want pending 10, dead 1, blocked 1; got %+v", st)
	}
	byType := map[string]cli.EventTypeStatus{}
	for _, et := range st.EventTypes {
		byType[et.EventType] = et
	}
	for typ, w := range map[string][2]int64{"order.created": {6, 0}, "user.renamed": {1, 1}, "order.paid": {3, 0}} {
		if g := byType[typ]; g.Pending != w[0] || g.Dead != w[1] {
			t.Errorf("event type %s: want pending %d dead %d, got %+v", typ, w[0], w[1], g)
		}
	}
	if g := byType["order.created"]; g.OldestPendingSeconds < 3500 || g.OldestPendingSeconds > 3700 {
		t.Errorf("order.created oldest pending: want about 3600s, got %.0f", g.OldestPendingSeconds)
	}

	r = run(t, []string{"OUTBOX_DATABASE_URL=" + dsn}, "status")
	for _, s := range []string{"pending: 10", "dead: 1", "blocked aggregates: 1", "order.created", "user.renamed"} {
		if r.code != 0 || !strings.Contains(r.stdout, s) {
			t.Errorf("status (text) lacks %q:\n%s", s, r)
		}
	}
}

func TestDeadListShowReplayDiscard(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	env := []string{"OUTBOX_DATABASE_URL=" + dsn, "USER=tester"}
	insert(t, pool, "order.created", "order", 6, 3, time.Minute) // order/0 and order/1, 3 each
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET dead_at = now(), attempts = 10, last_error = 'boom: 500'`); err != nil {
		t.Fatal(err)
	}
	r := run(t, env, "dead", "list", "--json")
	var dead []cli.DeadLetter
	if err := json.Unmarshal([]byte(r.stdout), &dead); r.code != 0 || err != nil || len(dead) != 6 {
		t.Fatalf("dead list --json: want 6 dead letters (%v)\n%s", err, r)
	}
	if dead[0].LastError != "boom: 500" || dead[0].Attempts != 10 || dead[0].AggregateType != "order" {
		t.Errorf("dead list: first line %+v", dead[0])
	}
	if r = run(t, env, "dead", "list"); r.code != 0 || strings.Count(r.stdout, "order/") != 6 {
		t.Errorf("dead list (text):\n%s", r)
	}
	id := dead[0].ID
	r = run(t, env, "dead", "show", id.String())
	var d cli.EventDetail
	if err := json.Unmarshal([]byte(r.stdout), &d); r.code != 0 || err != nil || d.ID != id || d.Payload != nil || d.PayloadBytes == 0 {
		t.Fatalf("dead show: want the event without its payload (%v)\n%s", err, r)
	}
	if r = run(t, env, "dead", "show", "--payload", id.String()); !strings.Contains(r.stdout, `\"n\": 1`) && !strings.Contains(r.stdout, `\"n\":1`) {
		t.Errorf("dead show --payload lacks the payload:\n%s", r)
	}
	if r = run(t, env, "dead", "show", uuid.NewString()); r.code != cli.ExitFailure || !strings.Contains(r.stderr, "no event with id") {
		t.Errorf("dead show of an unknown id:\n%s", r)
	}

	// Replay: --reason required; more than one needs --yes, and nothing happens without it.
	if r = run(t, env, "replay", "--aggregate", "order/0"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--reason") {
		t.Errorf("replay without --reason:\n%s", r)
	}
	r = run(t, env, "replay", "--aggregate", "order/0", "--reason", "fixed the endpoint")
	if r.code != cli.ExitNeedsConfirmation || !strings.HasPrefix(r.stdout, "3 dead events match") {
		t.Errorf("replay of 3 without --yes:\n%s", r)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.dead_letters`); n != 6 {
		t.Fatalf("replay without --yes changed events: %d dead left", n)
	}
	r = run(t, env, "replay", "--aggregate", "order/0", "--reason", "fixed the endpoint", "--yes")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "3 dead events match\nreplayed 3 event(s)") {
		t.Fatalf("replay --yes:\n%s", r)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = '0' AND dead_at IS NULL AND attempts = 0`); n != 3 {
		t.Errorf("replay: %d of 3 events pending again", n)
	}
	var (
		action, actor, reason string
		ids                   []uuid.UUID
	)
	if err := pool.QueryRow(t.Context(), `SELECT action, actor, reason, event_ids FROM outbox.replays ORDER BY id DESC LIMIT 1`).Scan(&action, &actor, &reason, &ids); err != nil {
		t.Fatal(err)
	}
	if action != "replay" || reason != "fixed the endpoint" || !strings.HasPrefix(actor, "outbox-cli:tester@") || len(ids) != 3 {
		t.Errorf("replay audit row: action %q actor %q reason %q ids %d", action, actor, reason, len(ids))
	}

	// One event by id needs no --yes; discard records its audit row too.
	r = run(t, env, "discard", "--id", dead[3].ID.String(), "--reason", "customer deleted", "--actor", "ops-42")
	if r.code != 0 || !strings.Contains(r.stdout, "discarded 1 event(s)") {
		t.Fatalf("discard --id:\n%s", r)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.replays WHERE action = 'discard' AND actor = 'ops-42' AND $1 = ANY(event_ids)`, dead[3].ID); n != 1 {
		t.Errorf("discard audit row: %d", n)
	}
	// A discarded event is no dead letter and cannot be replayed.
	if r = run(t, env, "replay", "--id", dead[3].ID.String(), "--reason", "x"); r.code != cli.ExitFailure || !strings.HasPrefix(r.stdout, "0 dead events match") {
		t.Errorf("replay of a discarded event:\n%s", r)
	}
	if r = run(t, env, "replay", "--id", "nope", "--reason", "x"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, `--id "nope"`) {
		t.Errorf("replay --id nope:\n%s", r)
	}
	if r = run(t, env, "discard", "--aggregate", "order", "--reason", "x"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--aggregate must be TYPE/ID") {
		t.Errorf("discard --aggregate order:\n%s", r)
	}
}

// TestDeadShowRedactsPayloadPaths: fields named by redact.paths carry
// canary PII; dead show --payload and tail --payload show them as [redacted], the rest
// as written.
func TestDeadShowRedactsPayloadPaths(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	const pii = "PII-CANARY-4111"
	var id uuid.UUID
	if err := pool.QueryRow(t.Context(), `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload, dead_at)
		VALUES (gen_random_uuid(), 'card', '1', 'card.charged', $1::jsonb, now()) RETURNING id`,
		`{"card":{"number":"`+pii+`","brand":"visa"},"items":[{"ssn":"`+pii+`"}],"amount":3}`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	env := []string{"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_REDACT_PATHS=$.card.number,$.items[*].ssn"}
	r := run(t, env, "dead", "show", "--payload", id.String())
	if r.code != 0 || strings.Contains(r.stdout, pii) || !strings.Contains(r.stdout, "[redacted]") || !strings.Contains(r.stdout, "visa") {
		t.Errorf("dead show --payload with redact.paths:\n%s", r)
	}
	r = run(t, env, "tail", "--from-seq", "0", "--count", "1", "--payload")
	if r.code != 0 || strings.Contains(r.stdout, pii) || !strings.Contains(r.stdout, "[redacted]") {
		t.Errorf("tail --payload with redact.paths:\n%s", r)
	}
	if r = run(t, []string{"OUTBOX_DATABASE_URL=" + dsn, "OUTBOX_REDACT_PATHS=card.number"}, "dead", "list"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "OUTBOX_REDACT_PATHS") {
		t.Errorf("a bad redact path:\n%s", r)
	}
}

// TestReplayByTypeSince: --type with --since names the dead events of a type written
// since then, and only those.
func TestReplayByTypeSince(t *testing.T) {
	t.Parallel()
	dsn, pool := database(t)
	env := []string{"OUTBOX_DATABASE_URL=" + dsn}
	insert(t, pool, "order.paid", "a", 2, 1, 48*time.Hour)
	insert(t, pool, "order.paid", "b", 3, 1, time.Hour)
	insert(t, pool, "order.created", "c", 4, 1, time.Hour)
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET dead_at = now(), attempts = 3`); err != nil {
		t.Fatal(err)
	}
	if r := run(t, env, "replay", "--since", "2h", "--reason", "x"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--since goes with --type") {
		t.Errorf("--since without --type:\n%s", r)
	}
	r := run(t, env, "replay", "--type", "order.paid", "--since", "24h", "--reason", "bug 12 fixed", "--yes")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "3 dead events match") {
		t.Fatalf("replay --type --since:\n%s", r)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE dead_at IS NULL`); n != 3 {
		t.Errorf("%d events replayed, want the 3 recent order.paid", n)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM outbox.events WHERE dead_at IS NULL AND (event_type <> 'order.paid' OR created_at < now() - interval '24 hours')`); n != 0 {
		t.Errorf("%d events outside the selection were replayed", n)
	}
}
