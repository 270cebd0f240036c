-- admin_events_after: one page of events matching the admin filter (see admin_filter) and
-- @state ('' any; published, discarded), in write order after seq @after, at most @limit
-- rows: a walk of the primary key from @after. Dead letters and pending events have
-- statements of their own (admin_events_dead, admin_events_pending), whose state is
-- written out so that even a generic plan walks their partial index: with the state a
-- parameter, the generic plan walked the primary key past 1M published rows for 200 dead
-- ones (770 ms; 0.3 ms through events_held).
SELECT {{include admin_event_columns}}
FROM {{schema}}.events e
WHERE {{include admin_filter}}
  AND (@state::text = ''
       OR (@state::text = 'published' AND e.published_at IS NOT NULL)
       OR (@state::text = 'discarded' AND e.discarded_at IS NOT NULL))
  AND e.seq > @after::bigint
ORDER BY e.seq
LIMIT @limit
