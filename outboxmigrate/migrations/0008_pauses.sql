-- 0008_pauses: an operator pauses the relaying of a part of the outbox — every event, one
-- relay partition, or one aggregate type — and resumes it later (relay.Pause,
-- relay.Resume, `outbox pause`, `outbox resume`, outboxadmin). Every claim reads the
-- active pauses in its own snapshot (claim_floor.sql), so a pause holds every relay of
-- the schema from its commit on; a batch claimed before it finishes. Enqueue is not
-- affected: events pile up, pending, and go out in order after the resume.
-- A row is kept after its resume, with who resumed it and why: the pauses are their own
-- audit log (docs/adr/0025-pause-in-the-claim.md).
-- {{schema}} is replaced by the quoted schema name before this runs.
CREATE TABLE {{schema}}.pauses (
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
CREATE UNIQUE INDEX pauses_active ON {{schema}}.pauses (scope, coalesce(partition, -1), coalesce(aggregate_type, ''))
    WHERE resumed_at IS NULL;
