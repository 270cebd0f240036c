-- claim_floor: where a claim starts reading the pending rows, and what it saw there. Not a
-- statement: it opens the WITH list of every claim and of the probe (claim_*.sql,
-- poison_candidates_*.sql, probe.sql), so their parameters include its two:
-- @floor: the floor, a seq no pending row is below (relay/floor.go keeps it; 0: read from
-- the first row); @replays: the last replay the relay knows of (outbox.replays.id).
--
-- Published and deleted rows leave their entries in the pending indexes until VACUUM
-- (killed, but still read past): after a drained backlog, a claim that reads
-- events_pending from its start walks every one of them (1M drained rows: 3,000 pages,
-- 10 ms, every claim, until autovacuum runs — or never, where it is off). From the
-- floor, it reads only what was drained since the relay's last look. A replay (dead
-- rows made pending again, below any floor) is seen here, in the claim's own snapshot,
-- and the claim reads from the first row.
--
-- paused is what is paused, for the claims' filters.
--
-- seen is what the relay learns from the claim (claim_seen.sql returns it): the lowest
-- pending seq at or above the floor, the snapshot's xmin and xmax (as bigints) and the
-- last replay's id; due, when the next row not yet available comes due.
WITH RECURSIVE replayed AS MATERIALIZED (
    SELECT coalesce(max(r.id), 0) AS id FROM {{schema}}.replays r
), bound AS MATERIALIZED (
    SELECT CASE WHEN (SELECT id FROM replayed) > @replays::bigint THEN 0 ELSE @floor::bigint END AS seq
), seen AS MATERIALIZED (
    SELECT (SELECT p.seq FROM {{schema}}.events p
            WHERE p.published_at IS NULL AND p.dead_at IS NULL AND p.available_at IS NOT NULL
              AND p.seq >= (SELECT seq FROM bound)
            ORDER BY p.seq
            LIMIT 1) AS min_pending,
           pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin,
           pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,
           (SELECT id FROM replayed) AS replays
), due AS MATERIALIZED (
    -- how long after the statement's now() the next pending row not yet available
    -- comes due (an event scheduled later with Event.AvailableAt, or backing off), among
    -- the first 64 pending rows (null: none there): an idle relay wakes then
    -- (relay/worker.go's idleWait), not at its next poll. An interval, not a time, so the
    -- relay's clock need not agree with the database's. Computed only where
    -- claim_seen.sql returns it. From the lowest pending row seen found, not from the
    -- bound: without a floor, a walk from the bound read every dead entry of a drained
    -- backlog a second time (twice the claim's buffers); these are the rows the claim
    -- reads first, cached pages.
    SELECT min(d.available_at) - now() AS after FROM (
        SELECT p.available_at FROM {{schema}}.events p
        WHERE p.published_at IS NULL AND p.dead_at IS NULL AND p.available_at IS NOT NULL
          AND p.seq >= (SELECT min_pending FROM seen)
        ORDER BY p.seq
        LIMIT 64) d
    WHERE d.available_at > now()
), paused AS MATERIALIZED (
    -- the active pauses (0008_pauses.sql, docs/adr/0025-pause-in-the-claim.md), read in
    -- this statement's snapshot, so a pause holds every claim that starts after its
    -- commit, in every relay of the schema: everything, or the relay partitions parts
    -- (of n: event partition p is in relay partition p * n / 4096), or the aggregate
    -- types types. A scan of pauses_active's few rows. The floor above ignores pauses:
    -- a paused row stays below it, pending, and is claimed after the resume.
    SELECT coalesce(bool_or(ps.scope = 'all'), false) AS everything,
           coalesce(array_agg(ps.partition) FILTER (WHERE ps.scope = 'partition'), '{}') AS parts,
           coalesce((SELECT c.partitions FROM {{schema}}.relay_config c), 1) AS n,
           coalesce(array_agg(ps.aggregate_type) FILTER (WHERE ps.scope = 'aggregate_type'), '{}') AS types
    FROM {{schema}}.pauses ps
    WHERE ps.resumed_at IS NULL
),
