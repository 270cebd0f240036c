-- claim_ordered: claim the next batch in ordered mode and mark it published in the same
-- statement, inside the relay's claim transaction. Parameters and how the rows are
-- picked: claim_ordered_pick.sql.
--
-- Claimed rows are marked published (attempt counted) before the sink has them, as in
-- claim_unordered.sql: the transaction stays open while the relay publishes, a crash or
-- a rollback undoes the mark, and what the sink did not take is put back by
-- unclaim_keep.sql before the commit (ADR 0004). Columns: as claim_unordered.sql's.
{{include claim_ordered_pick}}
UPDATE {{schema}}.events e
SET published_at = now(), attempts = e.attempts + 1
-- = ANY(ARRAY(…)): a TID scan of the locked rows whatever the plan (claim_unordered.sql)
WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM claimed))
RETURNING e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.event_type,
          e.schema_version, coalesce(e.topic, ''), e.headers, e.content_type,
          coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes), e.trace_parent, e.created_at,
          e.attempts - 1, e.available_at, e.last_error, e.payload IS NOT NULL
