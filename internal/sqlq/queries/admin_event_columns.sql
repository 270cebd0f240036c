-- admin_event_columns: the columns of an event as the admin lists it, its state named as
-- the admin names it (included; a shared part includes nothing, so the state is here).
e.seq, e.id, e.event_type, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.partition, CASE WHEN e.published_at IS NOT NULL THEN 'published' WHEN e.discarded_at IS NOT NULL THEN 'discarded' WHEN e.dead_at IS NOT NULL THEN 'dead' ELSE 'pending' END, e.created_at, e.available_at, e.attempts, coalesce(e.last_error, ''), e.published_at, e.dead_at, e.discarded_at
