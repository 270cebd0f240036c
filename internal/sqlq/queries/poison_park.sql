-- poison_park: park the row @seq that makes every claim including it fail as dead,
-- with the reason @reason, so that the relay goes on with the others. Its data stays as
-- written; in ordered mode it holds its aggregate, as any dead event, until it is
-- replayed (after the cause is fixed) or discarded. Only a row still pending changes.
UPDATE {{schema}}.events
SET dead_at = now(), last_error = @reason
WHERE seq = @seq AND published_at IS NULL AND dead_at IS NULL
