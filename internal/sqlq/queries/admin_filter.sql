-- admin_filter: the WHERE clause shared by the admin's event statements (included, not run
-- alone). An empty text or a NULL matches all: $1 id (uuid), $2 event_type, $3
-- aggregate_type, $4 aggregate_id, $5 created at or after, $6 created before (timestamptz).
($1::uuid IS NULL OR e.id = $1::uuid) AND ($2::text = '' OR e.event_type = $2::text) AND ($3::text = '' OR e.aggregate_type = $3::text) AND ($4::text = '' OR e.aggregate_id = $4::text) AND ($5::timestamptz IS NULL OR e.created_at >= $5::timestamptz) AND ($6::timestamptz IS NULL OR e.created_at < $6::timestamptz)
