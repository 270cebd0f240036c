-- emitted_write: write events a CDC reader decoded from the WAL in table-less mode
-- (outbox.Writer.Emit) into the events table, in the order given (so seq follows commit
-- order), each with its state: what the relay decided when it could not publish it
-- (@outcomes, relay/settle.go's words): 'untouched' pending as written, 'deferred' pending
-- after @delays_ms without an attempt counted (the sink was down), 'retry' pending after
-- @delays_ms with one attempt counted, 'dead' dead at once, 'held' pending until exactly
-- @available_at (its Publish call still runs: settle_late.sql settles it by that token
-- when the call returns, by the seq this statement returns); @errors is last_error. From
-- then on the event is a row like any other: the polling claims retry it, dead letters
-- hold its aggregate, replay and discard work. Bound by name to emittedRows in
-- relay/emitted.go, one element per event in every array; @payload_is_json says which
-- payload column the bytes go to (the Writer's content-type rule).
--
-- ON CONFLICT (id) DO NOTHING: a reader that crashed after writing them and before
-- confirming its position reads the same events again; their ids are there already. An
-- aggregate version another row holds already (Emit cannot check it) is written as NULL,
-- with a note in last_error, rather than failing the statement again at every read: the
-- event is kept, its version is not.
INSERT INTO {{schema}}.events (
    id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
    topic, headers, content_type, payload, payload_bytes, trace_parent, created_at,
    available_at, attempts, last_error, dead_at)
SELECT u.id, u.aggregate_type, u.aggregate_id, CASE WHEN NOT v.taken THEN nullif(u.aggregate_version, 0) END,
       u.event_type, u.schema_version,
       nullif(u.topic, ''), u.headers::jsonb, u.content_type,
       CASE WHEN u.payload_is_json THEN convert_from(u.payload, 'UTF8')::json END,
       CASE WHEN NOT u.payload_is_json THEN u.payload END,
       u.trace_parent, u.created_at,
       CASE WHEN u.outcome = 'held' THEN u.available_at
            ELSE greatest(u.available_at, now() + make_interval(secs => u.delay_ms / 1000.0)) END,
       CASE WHEN u.outcome IN ('retry', 'dead') THEN 1 ELSE 0 END,
       CASE WHEN v.taken THEN concat_ws('; ', 'aggregate version ' || u.aggregate_version || ' was written by another event already: kept without it', u.error)
            ELSE u.error END,
       CASE WHEN u.outcome = 'dead' THEN now() END
FROM unnest(@ids::uuid[], @aggregate_types::text[], @aggregate_ids::text[], @aggregate_versions::bigint[],
            @event_types::text[], @schema_versions::int[], @topics::text[], @headers::text[],
            @content_types::text[], @payloads::bytea[], @payload_is_json::bool[], @trace_parents::text[],
            @created_at::timestamptz[], @available_at::timestamptz[], @outcomes::text[], @errors::text[],
            @delays_ms::bigint[])
     WITH ORDINALITY AS u(id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
                          topic, headers, content_type, payload, payload_is_json, trace_parent,
                          created_at, available_at, outcome, error, delay_ms, ord)
CROSS JOIN LATERAL (
    SELECT u.aggregate_version > 0 AND EXISTS (
        SELECT 1 FROM {{schema}}.events x
        WHERE x.aggregate_type = u.aggregate_type AND x.aggregate_id = u.aggregate_id
          AND x.aggregate_version = u.aggregate_version AND x.id <> u.id) AS taken
) v
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING
RETURNING id, seq
