-- admin_filter: the WHERE clause shared by the admin's event statements (included, not run
-- alone). An empty text or a NULL matches all: @id (uuid), @event_type, @aggregate_type,
-- @aggregate_id, @created_from (created at or after), @created_to (created before).
(@id::uuid IS NULL OR e.id = @id::uuid) AND (@event_type::text = '' OR e.event_type = @event_type::text) AND (@aggregate_type::text = '' OR e.aggregate_type = @aggregate_type::text) AND (@aggregate_id::text = '' OR e.aggregate_id = @aggregate_id::text) AND (@created_from::timestamptz IS NULL OR e.created_at >= @created_from::timestamptz) AND (@created_to::timestamptz IS NULL OR e.created_at < @created_to::timestamptz)
