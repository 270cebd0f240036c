-- admin_audit: the audit log (replays), newest first, before id @before (NULL: from the
-- newest), at most @limit rows; with @event set, only the rows naming that event (a scan
-- of replays, which holds one row per operator action).
SELECT r.id, r.action, r.actor, r.reason, cardinality(r.event_ids), coalesce(r.filter::text, ''), r.created_at
FROM {{schema}}.replays r
WHERE (@before::bigint IS NULL OR r.id < @before::bigint)
  AND (@event::uuid IS NULL OR @event::uuid = ANY(r.event_ids))
ORDER BY r.id DESC
LIMIT @limit
