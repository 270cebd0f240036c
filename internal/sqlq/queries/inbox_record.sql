-- inbox_record: the dedup record of one (consumer, event), the first statement of
-- inbox.Process's transaction. ON CONFLICT DO NOTHING: a second delivery of the event
-- inserts nothing and is a duplicate — also one in a concurrent transaction, which waits
-- here on the first one's uncommitted row until that commits (then conflicts: a
-- duplicate) or rolls back (then inserts: the only delivery that counts). The outcome
-- starts as 'applied', the common case; the others are settled later in the transaction.
INSERT INTO {{schema}}.inbox (consumer, event_id, aggregate_type, aggregate_id, aggregate_version, event_type, outcome)
VALUES (@consumer, @event_id, @aggregate_type, @aggregate_id, @aggregate_version, @event_type, 'applied')
ON CONFLICT (consumer, event_id) DO NOTHING
