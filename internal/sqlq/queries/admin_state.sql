-- admin_state: an event's state as the admin names it, from its columns (included).
CASE WHEN e.published_at IS NOT NULL THEN 'published' WHEN e.discarded_at IS NOT NULL THEN 'discarded' WHEN e.dead_at IS NOT NULL THEN 'dead' ELSE 'pending' END
