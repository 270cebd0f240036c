-- inbox_outcome: settles the outcome of one event's dedup row. $1 consumer, $2 event id,
-- $3 outcome.
UPDATE {{schema}}.inbox SET outcome = $3, processed_at = now()
WHERE consumer = $1 AND event_id = $2
