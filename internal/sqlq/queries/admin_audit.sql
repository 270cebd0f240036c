-- admin_audit: the audit log (replays), newest first, before id $1 (NULL: from the newest),
-- at most $2 rows; with $3 set, only the rows naming that event (a scan of replays, which
-- holds one row per operator action).
SELECT r.id, r.action, r.actor, r.reason, cardinality(r.event_ids), coalesce(r.filter::text, ''), r.created_at
FROM {{schema}}.replays r
WHERE ($1::bigint IS NULL OR r.id < $1::bigint)
  AND ($3::uuid IS NULL OR $3::uuid = ANY(r.event_ids))
ORDER BY r.id DESC
LIMIT $2
