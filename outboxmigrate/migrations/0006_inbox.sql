-- 0006_inbox: the consumer side (package inbox). Part of the inbox set: a consumer that
-- only consumes runs the inbox set alone (outboxmigrate.Config.Sets), so nothing here
-- refers to the outbox tables.
--
-- inbox: one row per (consumer, event) ever processed: the dedup record, written in the
-- same transaction as the handler's effect. outcome says what became of the event.
-- Retention deletes old rows of the final outcomes in batches (inbox_processed_at); rows
-- of parked and quarantined events stay while those events wait.
-- {{schema}} is replaced by the quoted schema name before this runs.
-- outboxmigrate:set inbox
CREATE SCHEMA IF NOT EXISTS {{schema}};

CREATE TABLE {{schema}}.inbox (
    consumer          text        NOT NULL,
    event_id          uuid        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL DEFAULT 0,
    event_type        text        NOT NULL,
    outcome           text        NOT NULL CHECK (outcome IN ('applied', 'stale', 'parked', 'quarantined')),
    processed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Retention walks the oldest rows of the final outcomes: a partial index keeps the parked
-- and quarantined rows (which retention never deletes) out of its way.
CREATE INDEX inbox_processed_at ON {{schema}}.inbox (processed_at)
    WHERE outcome IN ('applied', 'stale');

-- inbox_versions: the last applied aggregate_version per (consumer, aggregate). Process
-- locks the row (INSERT … ON CONFLICT DO UPDATE) before it decides, and moves it only
-- forward (UPDATE … WHERE last_version = the value it read), so concurrent consumers can
-- never take it backwards.
CREATE TABLE {{schema}}.inbox_versions (
    consumer       text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    last_version   bigint      NOT NULL CHECK (last_version >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);

-- inbox_parked: events that arrived past a gap under the Park policy, waiting for the
-- versions before them. The event that closes the gap applies them in its transaction,
-- in version order, and deletes them.
CREATE TABLE {{schema}}.inbox_parked (
    consumer          text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    event_id          uuid        NOT NULL,
    seq               bigint      NOT NULL DEFAULT 0,
    event_type        text        NOT NULL,
    schema_version    integer     NOT NULL,
    topic             text        NOT NULL DEFAULT '',
    headers           jsonb,
    content_type      text        NOT NULL DEFAULT '',
    payload           bytea,
    trace_parent      text        NOT NULL DEFAULT '',
    created_at        timestamptz,
    parked_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id, aggregate_version)
);

-- inbox_quarantine: events a consumer would not or could not apply (a schema it does
-- not accept, a handler panic, a permanent handler error), with the reason; listed and
-- replayed through package inbox.
CREATE TABLE {{schema}}.inbox_quarantine (
    consumer          text        NOT NULL,
    event_id          uuid        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL DEFAULT 0,
    seq               bigint      NOT NULL DEFAULT 0,
    event_type        text        NOT NULL,
    schema_version    integer     NOT NULL,
    topic             text        NOT NULL DEFAULT '',
    headers           jsonb,
    content_type      text        NOT NULL DEFAULT '',
    payload           bytea,
    trace_parent      text        NOT NULL DEFAULT '',
    created_at        timestamptz,
    kind              text        NOT NULL CHECK (kind IN ('schema', 'panic', 'permanent')),
    reason            text        NOT NULL,
    attempts          integer     NOT NULL DEFAULT 1,
    quarantined_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
