-- 0003_events_pending_available: events_pending also states available_at IS NOT NULL
-- (always true: the column is NOT NULL). The claim walks and the probe imply it (they
-- filter on available_at <= now()); the per-aggregate probes of the ordered claim do
-- not, so they cannot pick this index. They did when ANALYZE ran after a large backlog
-- was drained and before VACUUM: the planner believed both pending indexes empty, chose
-- the smaller one, and every head probe walked the drained rows' dead entries (an ordered
-- claim of 1,000 rows behind 1M drained ones: 1.8–2.3 s each; with this index the first
-- takes 0.9 s, the next ones 47–55 ms; ADR 0002).
-- {{schema}} is replaced by the quoted schema name before this runs. The index is
-- rebuilt in the migration's transaction, which holds writers off meanwhile.
DROP INDEX {{schema}}.events_pending;
CREATE INDEX events_pending ON {{schema}}.events (seq)
    WHERE published_at IS NULL AND dead_at IS NULL AND available_at IS NOT NULL;
