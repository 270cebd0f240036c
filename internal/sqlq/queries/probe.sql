-- probe: is any event ready to publish in these relay partitions ($1 int[]; null: all; $2
-- the number of relay partitions, as in claim_ordered.sql)?
-- An idle relay asks this one cheap question (a walk of events_pending) instead of opening
-- a claim transaction; a true answer is followed by a claim.
SELECT EXISTS (
    SELECT 1 FROM {{schema}}.events
    WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now()
      AND ($1::int[] IS NULL OR partition * $2::int / 4096 = ANY($1::int[])))
