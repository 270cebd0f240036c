package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/outboxmigrate"
)

// migrateCommand is `outbox migrate [up|status|sql]`.
func (a *app) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox schema (up, the default), show its version (status), or print the SQL (sql)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return a.migrateUp(cmd) },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every migration not yet applied, in one transaction",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return a.migrateUp(cmd) },
	}, &cobra.Command{
		Use:   "status",
		Short: "Print the schema's version and the latest this build knows; exit code 4 when behind",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return a.migrateStatus(cmd) },
	}, &cobra.Command{
		Use:   "sql",
		Short: "Print every migration's SQL, rendered for the schema, for teams that run their own migration tool",
		Args:  cobra.NoArgs,
		RunE:  func(_ *cobra.Command, _ []string) error { return a.migrateSQL() },
	})
	return cmd
}

func (a *app) migrator() (*outboxmigrate.Migrator, error) {
	m, err := outboxmigrate.New(&outboxmigrate.Config{Schema: a.cfg.Schema, Logger: a.log})
	if err != nil {
		return nil, usagef("schema: %w", err)
	}
	return m, nil
}

func (a *app) migrateUp(cmd *cobra.Command) error {
	m, err := a.migrator()
	if err != nil {
		return err
	}
	pool, err := a.pool(cmd.Context())
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := m.Migrate(cmd.Context(), pool)
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		a.printf("schema %s is up to date at version %d\n", a.cfg.Schema, res.Version)
		return nil
	}
	a.printf("schema %s migrated to version %d (applied %v)\n", a.cfg.Schema, res.Version, res.Applied)
	return nil
}

func (a *app) migrateStatus(cmd *cobra.Command) error {
	m, err := a.migrator()
	if err != nil {
		return err
	}
	pool, err := a.pool(cmd.Context())
	if err != nil {
		return err
	}
	defer pool.Close()
	v, err := m.Version(cmd.Context(), pool)
	if err != nil {
		return fmt.Errorf("schema %s: %w", a.cfg.Schema, err)
	}
	a.printf("schema %s: version %d, latest %d\n", a.cfg.Schema, v, m.Latest())
	if v < m.Latest() {
		return exitError{ExitNotMigrated, fmt.Errorf("schema %s is behind: %d migration(s) to apply (outbox migrate up)", a.cfg.Schema, m.Latest()-v)}
	}
	return nil
}

func (a *app) migrateSQL() error {
	m, err := a.migrator()
	if err != nil {
		return err
	}
	for _, mig := range m.Migrations() {
		a.printf("-- %04d_%s\n%s\n", mig.Version, mig.Name, mig.SQL)
	}
	return nil
}
