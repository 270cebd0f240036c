-- claim_columns: what every claim (and every try of poison_try_*.sql) returns of a row,
-- in the order relay/scan.go reads it. Not a statement: each statement includes it in
-- its RETURNING list and appends the attempts made before the claim. The payload comes
-- back as bytes: JSON text as stored (the json type keeps it as written), or the bytea.
e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.event_type,
e.schema_version, coalesce(e.topic, ''), e.headers, e.content_type,
coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes), e.trace_parent, e.created_at,
e.available_at, e.last_error, e.payload IS NOT NULL
