package cli

import (
	"embed"
	"fmt"

	"github.com/outboxkit/outbox/internal/sqlq"
)

//go:embed queries/*.sql
var queryFiles embed.FS

// query returns the named query of queries/ rendered for the configured schema.
func (a *app) query(name string) (string, error) {
	quoted, err := sqlq.QuoteSchema(a.cfg.Schema)
	if err != nil {
		return "", usagef("schema: %w", err)
	}
	b, err := queryFiles.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("query %s: %v", name, err)) // the set is fixed at compile time
	}
	return sqlq.Render(string(b), quoted), nil
}

// bind returns the named query of queries/ rendered for the configured schema, with its
// @name parameters bound to the fields of P (sqlq.BindText).
func bind[P any](a *app, name string) (sqlq.Statement[P], error) {
	q, err := a.query(name)
	if err != nil {
		return sqlq.Statement[P]{}, err
	}
	return sqlq.BindText[P](name, q), nil
}

// coreQuery returns the named query of the core module's set (internal/sqlq), rendered
// for the configured schema: the queries this command shares with the libraries.
func (a *app) coreQuery(name string) (string, error) {
	quoted, err := sqlq.QuoteSchema(a.cfg.Schema)
	if err != nil {
		return "", usagef("schema: %w", err)
	}
	return sqlq.Query(name, quoted), nil
}
