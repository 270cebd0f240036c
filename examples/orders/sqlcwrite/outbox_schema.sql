-- Code generated from outboxmigrate's migrations (schema "outbox", the outbox set)
-- by TestOutboxSchemaFile -update. DO NOT EDIT. sqlc reads it; outboxmigrate applies the real thing.

-- migration 0001_init

-- 0001_init: the events table, its indexes, and the relay's coordination tables.
--
-- Immutable once released: later changes go in new numbered files.
-- "outbox" is replaced by the quoted schema name before this runs.
-- The index budget is explained in docs/adr/0002-index-budget.md.

CREATE SCHEMA IF NOT EXISTS "outbox";

-- partition_of maps an aggregate key to one of 4096 fixed event partitions: PostgreSQL's
-- hashtext (the hash behind hash indexes, which must not change across releases) of
-- aggregate_type || E'\x1f' || aggregate_id, low 12 bits. events.partition is generated
-- from the same expression, written inline there: a SQL function call in a generated
-- column cost writers measurably (docs/adr/0001-event-partitions.md).
-- Relay partitions (relay_config.partitions) cover contiguous ranges of event partitions,
-- so the relay's partition count can change without rewriting a row.
CREATE FUNCTION "outbox".partition_of(aggregate_type text, aggregate_id text)
RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (hashtext(aggregate_type || chr(31) || aggregate_id) & 4095)::smallint;

CREATE TABLE "outbox".events (
    -- write order; per aggregate it is commit order while writers take the aggregate lock
    seq               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- the event's identity: UUIDv7 unless the writer supplied one; sent as the message id
    id                uuid NOT NULL,
    aggregate_type    text NOT NULL,
    aggregate_id      text NOT NULL,
    -- optional; unique per aggregate when set
    aggregate_version bigint,
    partition         smallint NOT NULL GENERATED ALWAYS AS ((hashtext(aggregate_type || chr(31) || aggregate_id) & 4095)::smallint) STORED,
    event_type        text NOT NULL,
    schema_version    integer NOT NULL DEFAULT 1,
    -- overrides the sink's topic/subject/routing key when set
    topic             text,
    headers           jsonb NOT NULL DEFAULT '{}',
    content_type      text NOT NULL DEFAULT 'application/json',
    -- exactly one of payload (JSON content types) and payload_bytes (anything else) is set,
    -- or neither for an event without a body
    payload           jsonb,
    payload_bytes     bytea,
    trace_parent      text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- next attempt; also delayed delivery
    available_at      timestamptz NOT NULL DEFAULT now(),
    attempts          integer NOT NULL DEFAULT 0,
    last_error        text,
    published_at      timestamptz,
    -- dead: out of attempts or failed permanently; holds its aggregate until replayed or discarded
    dead_at           timestamptz,
    -- discarded by an operator (with a reason in replays); a discarded event holds nothing
    discarded_at      timestamptz,
    -- One CHECK for all rules: each constraint costs every INSERT statement its own
    -- expression set-up, so eight separate ones cost single-event writers measurably.
    -- Enqueue checks all of these (and more) in Go first; this guards raw-SQL writers
    -- and the relay's state changes.
    CONSTRAINT events_check CHECK (
        aggregate_type <> '' AND aggregate_id <> '' AND event_type <> ''
        AND (aggregate_version IS NULL OR aggregate_version > 0)
        AND schema_version >= 1
        -- at most one of payload (JSON content types) and payload_bytes
        AND (payload IS NULL OR payload_bytes IS NULL)
        -- published and dead exclude each other; discarded implies dead
        AND (published_at IS NULL OR dead_at IS NULL)
        AND (discarded_at IS NULL OR dead_at IS NOT NULL))
);

-- The dedup identity; also the arbiter of Enqueue's ON CONFLICT DO NOTHING.
CREATE UNIQUE INDEX events_id_key ON "outbox".events (id);

-- Concurrent writers of one aggregate version serialise here; only rows with a version pay for it.
CREATE UNIQUE INDEX events_aggregate_version_key ON "outbox".events (aggregate_type, aggregate_id, aggregate_version)
    WHERE aggregate_version IS NOT NULL;

-- Pending rows in write order: the claim scan. Partial, so its size follows the backlog,
-- not the table; published and dead rows leave it.
CREATE INDEX events_pending ON "outbox".events (seq)
    WHERE published_at IS NULL AND dead_at IS NULL;

-- Pending rows by aggregate: the ordered mode's "is this row its aggregate's head" probe.
CREATE INDEX events_pending_aggregate ON "outbox".events (aggregate_type, aggregate_id, seq)
    WHERE published_at IS NULL AND dead_at IS NULL;

-- Dead rows that still hold their aggregate: few by nature, so nearly free.
CREATE INDEX events_held ON "outbox".events (aggregate_type, aggregate_id, seq)
    WHERE dead_at IS NOT NULL AND discarded_at IS NULL;

-- Dead letters: dead and not discarded.
CREATE VIEW "outbox".dead_letters AS
SELECT seq, id, aggregate_type, aggregate_id, aggregate_version, partition, event_type,
       schema_version, topic, created_at, attempts, last_error, dead_at
FROM "outbox".events
WHERE dead_at IS NOT NULL AND discarded_at IS NULL;

-- The slim audit row kept by the "archive" retention mode after the event row is purged.
CREATE TABLE "outbox".events_archive (
    id                uuid PRIMARY KEY,
    seq               bigint NOT NULL,
    aggregate_type    text NOT NULL,
    aggregate_id      text NOT NULL,
    aggregate_version bigint,
    event_type        text NOT NULL,
    created_at        timestamptz NOT NULL,
    published_at      timestamptz,
    archived_at       timestamptz NOT NULL DEFAULT now()
);

-- One row: the settings every relay instance must agree on.
CREATE TABLE "outbox".relay_config (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    mode       text NOT NULL CHECK (mode IN ('ordered', 'unordered')),
    partitions integer NOT NULL CHECK (partitions BETWEEN 1 AND 4096),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per relay partition; the epoch is bumped on every acquisition and fences stale owners.
CREATE TABLE "outbox".leases (
    partition    integer PRIMARY KEY CHECK (partition >= 0),
    owner        text,
    epoch        bigint NOT NULL DEFAULT 0,
    acquired_at  timestamptz,
    renewed_at   timestamptz,
    expires_at   timestamptz NOT NULL DEFAULT '-infinity'
);

-- Audit of operator actions on events: who, when, why, which.
CREATE TABLE "outbox".replays (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action     text NOT NULL CHECK (action IN ('replay', 'discard')),
    actor      text NOT NULL CHECK (actor <> ''),
    reason     text NOT NULL CHECK (reason <> ''),
    event_ids  uuid[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- migration 0002_relay_members

-- 0002_relay_members: relay instances announce themselves, so partitions are shared fairly.
-- "outbox" is replaced by the quoted schema name before this runs.

CREATE TABLE "outbox".relay_members (
    -- random per process start
    owner        text PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- migration 0003_events_pending_available

-- 0003_events_pending_available: events_pending also states available_at IS NOT NULL
-- (always true: the column is NOT NULL). The claim walks and the probe imply it (they
-- filter on available_at <= now()); the per-aggregate probes of the ordered claim do
-- not, so they cannot pick this index. They did when ANALYZE ran after a large backlog
-- was drained and before VACUUM: the planner believed both pending indexes empty, chose
-- the smaller one, and every head probe walked the drained rows' dead entries (an ordered
-- claim of 1,000 rows behind 1M drained ones: 1.8–2.3 s each; with this index the first
-- takes 0.9 s, the next ones 47–55 ms; ADR 0002).
-- "outbox" is replaced by the quoted schema name before this runs. The index is
-- rebuilt in the migration's transaction, which holds writers off meanwhile.
DROP INDEX "outbox".events_pending;
CREATE INDEX events_pending ON "outbox".events (seq)
    WHERE published_at IS NULL AND dead_at IS NULL AND available_at IS NOT NULL;

-- migration 0004_lock_aggregate

-- 0004_lock_aggregate: the aggregate lock as a function, for writers that insert events
-- with their own SQL (another language, sqlc, a trigger). Enqueue takes this lock on
-- each aggregate it writes, in the same statement as the INSERT (sorted by key, so two
-- transactions cannot deadlock on it within one statement): while a transaction holds
-- it, another writer of the aggregate waits, so seq order is commit order and the relay
-- publishes in it. A raw-SQL writer keeps that order by calling
--
--     SELECT outbox.lock_aggregate('order', '42');
--
-- in its transaction before its INSERT into outbox.events (and, writing several
-- aggregates, in one consistent order). The key — class 1869968760, the hash of
-- aggregate_type || E'\x1f' || aggregate_id — must stay the one the enqueue statements
-- inline (a function call there cost writers measurably).
-- "outbox" is replaced by the quoted schema name before this runs.
CREATE FUNCTION "outbox".lock_aggregate(aggregate_type text, aggregate_id text)
RETURNS void
LANGUAGE sql VOLATILE STRICT
RETURN pg_advisory_xact_lock(1869968760, hashtext(aggregate_type || chr(31) || aggregate_id));

-- migration 0005_payload_json

-- 0005_payload_json: JSON payloads are stored as json, not jsonb: the json type keeps the
-- text exactly as the writer sent it (whitespace, key order, duplicate keys, number and
-- escape spellings) and still checks it is JSON, so the sink receives the producer's
-- bytes — signatures, hashes and schema-registry framing computed over them hold — and
-- the relay never renders a payload (a jsonb payload of numbers with huge exponents was
-- rendered at 100,000 digits a number; docs/adr/0007-payload-bytes-as-written.md).
-- Existing rows keep jsonb's rendering of what they were written as. A deployment that
-- wants jsonb (to index or query payloads) can alter the column back: Enqueue and the
-- relay work with either type.
-- "outbox" is replaced by the quoted schema name before this runs. The table is
-- rewritten in the migration's transaction, which holds writers off meanwhile.
ALTER TABLE "outbox".events ALTER COLUMN payload TYPE json USING payload::json;

-- migration 0007_replays_filter

-- 0007_replays_filter: an audit row of a set-based replay or discard (outboxadmin) records
-- the filter the operator chose, beside the ids it matched, so the audit log answers
-- "which events, and why those" (docs/adr/0020-admin-set-based-operations.md). NULL for
-- actions that named their events by id (relay.Replay, relay.Discard).
-- "outbox" is replaced by the quoted schema name before this runs.
ALTER TABLE "outbox".replays ADD COLUMN filter jsonb;

-- migration 0008_pauses

-- 0008_pauses: an operator pauses the relaying of a part of the outbox — every event, one
-- relay partition, or one aggregate type — and resumes it later (relay.Pause,
-- relay.Resume, `outbox pause`, `outbox resume`, outboxadmin). Every claim reads the
-- active pauses in its own snapshot (claim_floor.sql), so a pause holds every relay of
-- the schema from its commit on; a batch claimed before it finishes. Enqueue is not
-- affected: events pile up, pending, and go out in order after the resume.
-- A row is kept after its resume, with who resumed it and why: the pauses are their own
-- audit log (docs/adr/0025-pause-in-the-claim.md).
-- "outbox" is replaced by the quoted schema name before this runs.
CREATE TABLE "outbox".pauses (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- 'all', 'partition' (a relay partition: event partition p is in relay partition
    -- p * relay_config.partitions / 4096) or 'aggregate_type'
    scope          text NOT NULL CHECK (scope IN ('all', 'partition', 'aggregate_type')),
    partition      int CHECK (partition >= 0),
    aggregate_type text,
    paused_by      text NOT NULL CHECK (paused_by <> ''),
    reason         text NOT NULL CHECK (reason <> ''),
    paused_at      timestamptz NOT NULL DEFAULT now(),
    resumed_by     text,
    resume_reason  text,
    resumed_at     timestamptz,
    CHECK ((scope = 'partition') = (partition IS NOT NULL)),
    CHECK ((scope = 'aggregate_type') = (aggregate_type IS NOT NULL)),
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL) AND (resumed_at IS NULL) = (resume_reason IS NULL))
);

-- at most one active pause per scope; the claims read this index's rows only
CREATE UNIQUE INDEX pauses_active ON "outbox".pauses (scope, coalesce(partition, -1), coalesce(aggregate_type, ''))
    WHERE resumed_at IS NULL;

-- migration 0009_relay_members_state

-- 0009_relay_members_state: each relay reports its sink's state and its counters with
-- every heartbeat (lease_beat.sql), so operators see every process's breaker from the
-- database (outboxadmin's overview, the relays' API) — state that otherwise lives only
-- in the relay's memory and its own /metrics.
-- "outbox" is replaced by the quoted schema name before this runs.
ALTER TABLE "outbox".relay_members
    -- not NULL while the relay's breaker is open (its sink was found down and no probe
    -- has succeeded since): until when it waits before its next probe, which may be past
    -- while a probe is due or under way; NULL: closed (the sink is up)
    ADD COLUMN breaker_open_until timestamptz,
    -- the relay's counters since it started, as of its last heartbeat
    ADD COLUMN published bigint NOT NULL DEFAULT 0,
    ADD COLUMN dead bigint NOT NULL DEFAULT 0,
    ADD COLUMN breaker_opens bigint NOT NULL DEFAULT 0;
