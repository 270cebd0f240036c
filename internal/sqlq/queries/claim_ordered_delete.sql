-- claim_ordered_delete: claim_ordered.sql for delete-on-publish retention: the claimed
-- rows are deleted in the claim statement, inside the relay's claim transaction. A crash
-- or a rollback undoes the delete; the messages the sink refused are inserted again,
-- whole, by unclaim_delete.sql before the commit. Parameters and how the rows are
-- picked: claim_ordered_pick.sql. Columns: as claim_unordered.sql's.
{{include claim_ordered_pick}}
DELETE FROM {{schema}}.events e
-- = ANY(ARRAY(…)): a TID scan of the locked rows whatever the plan (claim_unordered.sql)
WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM claimed))
RETURNING e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.event_type,
          e.schema_version, coalesce(e.topic, ''), e.headers, e.content_type,
          coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes), e.trace_parent, e.created_at,
          e.attempts, e.available_at, e.last_error, e.payload IS NOT NULL
