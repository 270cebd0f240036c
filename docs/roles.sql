-- roles.sql: a least-privilege role per component of the outbox, for schema "outbox".
-- docs/operations.md ("Privileges") explains each grant; TestRolesFile (roles_test.go)
-- applies this file to a migrated database and runs every component as its role.
--
-- Run it as a superuser (it creates roles, grants pg_read_all_stats and creates a schema
-- for another role):
--
--   1. once before the first migration (it creates the roles and the schema, owned by
--      outbox_migrator, and grants nothing on tables that do not exist yet);
--   2. `outbox migrate` (or outboxmigrate) as a login role of outbox_migrator;
--   3. again after every migration: it grants on the tables that exist now. Running it
--      twice changes nothing.
--
-- The roles are NOLOGIN groups: give each service a login role of its own and make it a
-- member (CREATE ROLE orders_api LOGIN IN ROLE outbox_writer). Roles belong to the
-- whole cluster, grants to this database: in another database run it there too.
-- Another schema: replace "outbox." and 'outbox' below with yours (role names may stay).

-- The roles. CREATE ROLE has no IF NOT EXISTS: an existing role is kept as it is.
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['outbox_migrator', 'outbox_writer', 'outbox_relay', 'outbox_operator', 'outbox_consumer'] LOOP
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- exists (unique_violation: created by a concurrent run)
        END;
    END LOOP;
END
$roles$;

-- The migrator owns the schema and everything the migrations create in it. The
-- migrations begin with CREATE SCHEMA IF NOT EXISTS, which PostgreSQL refuses without
-- CREATE on the database even when the schema exists.
DO $database$
BEGIN
    EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO outbox_migrator', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO outbox_writer, outbox_relay, outbox_operator, outbox_consumer', current_database());
END
$database$;
CREATE SCHEMA IF NOT EXISTS outbox AUTHORIZATION outbox_migrator;
GRANT USAGE ON SCHEMA outbox TO outbox_writer, outbox_relay, outbox_operator, outbox_consumer;

-- `outbox relay`'s outbox_oldest_transaction_age_seconds (the OutboxOldTransaction alert)
-- reads backend_xmin in pg_stat_activity, which PostgreSQL shows only for the sessions
-- of the reader's own roles unless it has pg_read_all_stats: without this grant the
-- gauge reads 0 whatever transaction holds vacuum back. It also shows the relay every
-- session's query text; drop it (and watch pg_stat_activity yourself) if that is too much.
GRANT pg_read_all_stats TO outbox_relay;

-- The tables' grants, each applied only when its table exists (a consumer-only database
-- has the inbox tables alone; before the first migration there are none).
DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM (VALUES
        -- writer: outbox.Enqueue and outbox.Writer. INSERT; the id column only to read
        -- back (RETURNING id, and the duplicate-id check after ON CONFLICT DO NOTHING):
        -- a writer never reads payloads. outbox.Notifier's pg_notify needs nothing.
        ('outbox_writer',   'events',         'INSERT, SELECT (id)'),
        -- relay: relay.Relay (claims, settles, delete-on-publish, retention, the
        -- lease and membership rows, the recorded mode) and `outbox relay`'s gauges.
        -- SELECT on events_archive: the archive's INSERT … ON CONFLICT (id) needs it.
        ('outbox_relay',    'events',         'SELECT, INSERT, UPDATE, DELETE'),
        ('outbox_relay',    'events_archive', 'SELECT, INSERT'),
        ('outbox_relay',    'relay_config',   'SELECT, INSERT'),
        ('outbox_relay',    'leases',         'SELECT, INSERT, UPDATE'),
        ('outbox_relay',    'relay_members',  'SELECT, INSERT, UPDATE, DELETE'),
        ('outbox_relay',    'replays',        'SELECT'),
        ('outbox_relay',    'pauses',         'SELECT'),
        -- operator: outbox status/dead/replay/discard/pause/resume/purge/tail/migrate
        -- status, and outboxadmin. The audit log (replays) is append-only for it:
        -- INSERT, never UPDATE or DELETE; of a pause row only the resume's columns.
        ('outbox_operator', 'events',            'SELECT, UPDATE, DELETE'),
        ('outbox_operator', 'dead_letters',      'SELECT'),
        ('outbox_operator', 'events_archive',    'SELECT, INSERT'),
        ('outbox_operator', 'replays',           'SELECT, INSERT'),
        ('outbox_operator', 'pauses',            'SELECT, INSERT, UPDATE (resumed_at, resumed_by, resume_reason)'),
        ('outbox_operator', 'relay_config',      'SELECT'),
        ('outbox_operator', 'leases',            'SELECT'),
        ('outbox_operator', 'relay_members',     'SELECT'),
        ('outbox_operator', 'schema_migrations', 'SELECT'),
        -- consumer: inbox.Process, the runners, Consumer.Replay, Quarantined and Purge.
        ('outbox_consumer', 'inbox',            'SELECT, INSERT, UPDATE, DELETE'),
        ('outbox_consumer', 'inbox_versions',   'SELECT, INSERT, UPDATE'),
        ('outbox_consumer', 'inbox_parked',     'SELECT, INSERT, DELETE'),
        ('outbox_consumer', 'inbox_quarantine', 'SELECT, INSERT, UPDATE, DELETE')
    ) AS t(role, tbl, privileges) LOOP
        IF to_regclass(format('outbox.%I', g.tbl)) IS NOT NULL THEN
            EXECUTE format('GRANT %s ON outbox.%I TO %I', g.privileges, g.tbl, g.role);
        END IF;
    END LOOP;
    -- Raw-SQL writers call outbox.lock_aggregate (EXECUTE is PUBLIC's by default; granted
    -- here for databases that revoke it).
    IF to_regprocedure('outbox.lock_aggregate(text, text)') IS NOT NULL THEN
        GRANT EXECUTE ON FUNCTION outbox.lock_aggregate(text, text) TO outbox_writer;
    END IF;
END
$grants$;
