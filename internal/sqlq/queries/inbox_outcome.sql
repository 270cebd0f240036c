-- inbox_outcome: settles the outcome of one event's dedup row.
UPDATE {{schema}}.inbox SET outcome = @outcome, processed_at = now()
WHERE consumer = @consumer AND event_id = @event_id
