-- admin_event: one event by @id, for the admin's detail view. The payload and the header
-- values are read only when @show_payloads is true; otherwise their sizes.
SELECT {{include admin_event_columns}},
       e.schema_version, coalesce(e.topic, ''), e.content_type, coalesce(e.trace_parent, ''),
       CASE WHEN @show_payloads::bool THEN e.headers::text ELSE (SELECT coalesce(jsonb_object_agg(k, '<redacted>'), '{}')::text FROM jsonb_object_keys(e.headers) k) END,
       coalesce(octet_length(e.payload::text), octet_length(e.payload_bytes), 0),
       CASE WHEN @show_payloads::bool THEN coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes) END
FROM {{schema}}.events e
WHERE e.id = @id
