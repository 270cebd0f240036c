// Package outboxmigrate creates and upgrades the outbox schema: numbered SQL
// migrations embedded in the binary, applied in one transaction under a
// transaction-scoped advisory lock, so any number of processes may migrate at once.
//
// The migrations come in sets: [SetOutbox] (the events and the relay's tables) and
// [SetInbox] (the consumer side, package inbox). A Migrator applies every set by default;
// a service that only consumes selects [SetInbox] alone ([Config.Sets]) and gets the inbox
// tables without the outbox's. Which migrations were applied is recorded one by one, so a
// schema can take the other set later.
//
// Teams that run their own migration tool (goose, atlas, tern, …) can take the SQL
// instead: [Migrator.Migrations] returns each migration rendered for the configured
// schema.
package outboxmigrate

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/slogdefault"
	"github.com/outboxkit/outbox/internal/sqlq"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// lockClass is the advisory-lock class of migrations ('outm'); the key is a hash of the schema.
const lockClass = 1869968749

// ErrNotUTF8 is returned by Migrate for a database whose encoding is not UTF8. Events are
// UTF-8 (JSON payloads, names, headers); in another encoding a payload would reach the
// sink converted (a LATIN1 database sends "café" as "cafÃ©"), or fail for characters the
// encoding lacks. Create the database with ENCODING 'UTF8'.
var ErrNotUTF8 = errors.New("the database's encoding is not UTF8: create it with ENCODING 'UTF8' (CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0)")

// Config configures a [Migrator]. Nil means the defaults.
type Config struct {
	// Schema is the schema to create or upgrade. Default "outbox". It must be a plain
	// identifier: lowercase letters, digits and underscores, at most 63 bytes.
	Schema string
	// Logger receives one line per applied migration, at Info. Default: slog.Default()
	// at Warn and above (so, by default, nothing is logged while migrations succeed).
	Logger *slog.Logger
	// Sets selects the migration sets to apply. Default: every set ([SetOutbox] and
	// [SetInbox]). A consumer-only service passes []Set{SetInbox}.
	Sets []Set
}

// Set names a group of migrations that can be applied without the others.
type Set string

const (
	// SetOutbox is the producer side: events, the relay's leases and configuration.
	SetOutbox Set = "outbox"
	// SetInbox is the consumer side: the tables of package inbox (dedup rows,
	// per-aggregate versions, parked and quarantined events). It needs nothing of
	// SetOutbox.
	SetInbox Set = "inbox"
)

// setMarker, at the start of a line of a migration's header, names the set the
// migration belongs to; a migration without one belongs to SetOutbox.
const setMarker = "-- outboxmigrate:set "

// Migration is one numbered migration, rendered for the configured schema.
type Migration struct {
	// Version is the migration's number, from its file name (0001_init.sql → 1).
	Version int
	// Name is the rest of the file name (init).
	Name string
	// Set is the set the migration belongs to.
	Set Set
	// SQL is the migration's text with the schema substituted.
	SQL string
}

// Migrator applies the outbox migrations to one schema.
type Migrator struct {
	schema     string
	quoted     string
	logger     *slog.Logger
	migrations []Migration // the selected sets' migrations, in order
	latest     int         // the highest version this build knows, of any set
}

// New returns a Migrator for cfg.
func New(cfg *Config) (*Migrator, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	schema := cfg.Schema
	if schema == "" {
		schema = sqlq.DefaultSchema
	}
	quoted, err := sqlq.QuoteSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("Config.Schema: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slogdefault.Logger()
	}
	sets := map[Set]bool{SetOutbox: len(cfg.Sets) == 0, SetInbox: len(cfg.Sets) == 0}
	for i, s := range cfg.Sets {
		if s != SetOutbox && s != SetInbox {
			return nil, fmt.Errorf("Config.Sets[%d]: unknown set %q (known: %q, %q)", i, s, SetOutbox, SetInbox)
		}
		sets[s] = true
	}
	all, err := load(quoted)
	if err != nil {
		return nil, err
	}
	m := &Migrator{schema: schema, quoted: quoted, logger: logger, latest: len(all)}
	for _, mig := range all {
		if sets[mig.Set] {
			m.migrations = append(m.migrations, mig)
		}
	}
	return m, nil
}

// setOf returns the set a migration's text declares (see setMarker).
func setOf(name, text string) (Set, error) {
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "--") {
			break
		}
		if rest, ok := strings.CutPrefix(line, setMarker); ok {
			switch s := Set(strings.TrimSpace(rest)); s {
			case SetOutbox, SetInbox:
				return s, nil
			default:
				return "", fmt.Errorf("migration %s: unknown set %q", name, s)
			}
		}
	}
	return SetOutbox, nil
}

func load(quoted string) ([]Migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for i, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, rest, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v != i+1 {
			return nil, fmt.Errorf("migration %s: expected number %04d", name, i+1)
		}
		b, err := migrationFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		set, err := setOf(name, string(b))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: rest, Set: set, SQL: sqlq.Render(string(b), quoted)})
	}
	return out, nil
}

// Migrations returns every migration of the selected sets, in order, rendered for the
// configured schema.
func (m *Migrator) Migrations() []Migration {
	return append([]Migration(nil), m.migrations...)
}

// Latest returns the highest migration version this build knows, of any set.
func (m *Migrator) Latest() int { return m.latest }

// Result says what [Migrator.Migrate] did.
type Result struct {
	// Applied lists the versions applied by this call, in order; empty when the schema
	// was already current.
	Applied []int
	// Version is the schema's version after the call: the highest version applied to
	// it, of any set.
	Version int
}

// Migrate applies every migration of the selected sets not yet applied, in order, in one
// transaction begun on db.
// A transaction-scoped advisory lock (never a session lock, which a pooled connection
// could keep or lose silently) serialises concurrent migrators of the same schema;
// the second finds the work done and applies nothing.
func (m *Migrator) Migrate(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
},
) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var encoding string
		if err := tx.QueryRow(ctx, "SELECT current_setting('server_encoding')").Scan(&encoding); err != nil {
			return fmt.Errorf("read the database's encoding: %w", err)
		}
		if encoding != "UTF8" {
			return fmt.Errorf("%w: it is %s", ErrNotUTF8, encoding)
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", lockClass, m.lockKey()); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlq.Render(versionTableSQL, m.quoted)); err != nil {
			return fmt.Errorf("create version table: %w", err)
		}
		applied, err := appliedVersions(ctx, tx, m.quoted)
		if err != nil {
			return err
		}
		current := 0
		for v := range applied {
			current = max(current, v)
		}
		if current > m.latest {
			return fmt.Errorf("schema %s is at version %d, newer than this build knows (%d): upgrade the binary", m.schema, current, m.latest)
		}
		for _, mig := range m.migrations {
			if applied[mig.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, mig.SQL); err != nil {
				return fmt.Errorf("apply migration %04d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := tx.Exec(ctx, sqlq.Render(recordVersionSQL, m.quoted), mig.Version, mig.Name); err != nil {
				return fmt.Errorf("record migration %04d: %w", mig.Version, err)
			}
			m.logger.InfoContext(ctx, "applied migration", slog.String("schema", m.schema), slog.Int("version", mig.Version), slog.String("name", mig.Name))
			res.Applied = append(res.Applied, mig.Version)
			current = max(current, mig.Version)
		}
		res.Version = current
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("migrate schema %s: %w", m.schema, err)
	}
	return res, nil
}

// Version returns the schema's current version: the highest version applied, of any set
// (0 when it was never migrated).
func (m *Migrator) Version(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
},
) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", m.quoted+".schema_migrations").Scan(&exists); err != nil {
		return 0, fmt.Errorf("look up version table: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := db.QueryRow(ctx, sqlq.Render(currentVersionSQL, m.quoted)).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

func (m *Migrator) lockKey() int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(m.schema))
	return int32(h.Sum32()) //nolint:gosec // a hash: wrapping is intended
}

func appliedVersions(ctx context.Context, tx pgx.Tx, quoted string) (map[int]bool, error) {
	rows, err := tx.Query(ctx, sqlq.Render(appliedVersionsSQL, quoted))
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

const (
	versionTableSQL = `CREATE SCHEMA IF NOT EXISTS {{schema}};
CREATE TABLE IF NOT EXISTS {{schema}}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	currentVersionSQL  = `SELECT coalesce(max(version), 0) FROM {{schema}}.schema_migrations`
	appliedVersionsSQL = `SELECT version FROM {{schema}}.schema_migrations`
	recordVersionSQL   = `INSERT INTO {{schema}}.schema_migrations (version, name) VALUES ($1, $2)`
)
