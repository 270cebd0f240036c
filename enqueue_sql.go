package outbox

import (
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/sqlq"
)

// enqueueStatements are a Writer's statements, rendered for its schema, each bound by
// name to its parameter struct (enqueue_params.go).
type enqueueStatements struct {
	// one takes a single event as scalar parameters (both drivers); json a batch as one
	// JSON array (database/sql: any driver); arrays a batch as typed arrays in pgx's
	// binary format (ADR 0003).
	one       enqueueStatement[oneParams]
	json      enqueueStatement[jsonParams]
	arrays    enqueueStatement[arraysParams]
	conflicts sqlq.Statement[conflictsParams]
	// emit writes a batch into the WAL only (Writer.Emit)
	emit sqlq.Statement[emitParams]
}

func newEnqueueStatements(quotedSchema string) enqueueStatements {
	return enqueueStatements{
		one:       newEnqueueStatement[oneParams]("enqueue_one", quotedSchema),
		json:      newEnqueueStatement[jsonParams]("enqueue", quotedSchema),
		arrays:    newEnqueueStatement[arraysParams]("enqueue_arrays", quotedSchema),
		conflicts: sqlq.Bind[conflictsParams]("enqueue_conflicts", quotedSchema),
		emit:      sqlq.Bind[emitParams]("emit", quotedSchema),
	}
}

// bind returns the statement p is the parameters of, and p as its arguments.
func (s *enqueueStatements) bind(p enqueueParams) (enqueueSQL, []any) {
	switch p := p.(type) {
	case *oneParams:
		return s.one.sql, s.one.stmt.Args(p)
	case *arraysParams:
		return s.arrays.sql, s.arrays.stmt.Args(p)
	case *jsonParams:
		return s.json.sql, s.json.stmt.Args(p)
	default:
		panic(fmt.Sprintf("outbox: no enqueue statement takes %T", p))
	}
}

// enqueueStatement is one enqueue statement bound to its parameters P.
type enqueueStatement[P any] struct {
	stmt sqlq.Statement[P]
	sql  enqueueSQL
}

// enqueueSQL is one enqueue statement in its two forms.
type enqueueSQL struct {
	// arbiter ends in ON CONFLICT DO NOTHING RETURNING id: for calls in which an event
	// may conflict (a caller-supplied id or an aggregate version).
	arbiter string
	// plain is the statement without that line: every other call. A speculative
	// insertion costs each row a pre-check of every unique index and an extra WAL
	// record, and an id Enqueue generated (UUIDv7) does not collide.
	plain string
}

// conflictClause is the last line of every enqueue statement.
const conflictClause = "ON CONFLICT DO NOTHING RETURNING id::text"

func newEnqueueStatement[P any](name, quotedSchema string) enqueueStatement[P] {
	stmt := sqlq.Bind[P](name, quotedSchema)
	q := strings.TrimSpace(stmt.SQL)
	plain, ok := strings.CutSuffix(q, conflictClause)
	if !ok {
		panic(fmt.Sprintf("outbox: query %s does not end with %q", name, conflictClause))
	}
	return enqueueStatement[P]{stmt: stmt, sql: enqueueSQL{arbiter: q, plain: plain}}
}
