package sqlq

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated is the root package's outbox.ErrNotMigrated: a table, column or function
// a statement needs does not exist in the schema.
var ErrNotMigrated = errors.New("schema not migrated")

// NotMigrated returns err with [ErrNotMigrated] and the fix when PostgreSQL answered that
// a schema, table, column or function does not exist (the database was never migrated,
// or not to this version); any other err unchanged.
func NotMigrated(schema string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "3F000", "42P01", "42703", "42883": // invalid schema name; undefined table, column, function
		return fmt.Errorf("%w: schema %q lacks what this version needs (%s): run `outbox migrate` or outboxmigrate.Migrate first: %w",
			ErrNotMigrated, schema, pe.Message, err)
	}
	return err
}
