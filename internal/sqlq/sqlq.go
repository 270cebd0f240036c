// Package sqlq holds the project's SQL, embedded from .sql files, and renders it
// for a configured schema. Nothing user-supplied is ever concatenated into SQL:
// the only substitution is the schema name, validated by [QuoteSchema] first.
package sqlq

import (
	"embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

//go:embed queries/*.sql
var files embed.FS

// DefaultSchema is the schema used when none is configured.
const DefaultSchema = "outbox"

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN - 1.
const maxIdentifierBytes = 63

// ValidateSchema reports whether name is an acceptable schema name: 1 to 63 bytes of
// lowercase ASCII letters, digits and underscores, not starting with a digit and not
// starting with "pg_" (reserved by PostgreSQL). The allow-list is deliberately
// narrower than what quoting permits, so a schema name never needs explaining.
func ValidateSchema(name string) error {
	if name == "" {
		return fmt.Errorf("schema name is empty")
	}
	if len(name) > maxIdentifierBytes {
		return fmt.Errorf("schema name %q is %d bytes; at most %d are allowed", name, len(name), maxIdentifierBytes)
	}
	for i, r := range name {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("schema name %q: character %q at byte %d is not allowed (use lowercase letters, digits and underscores, starting with a letter or underscore)", name, r, i)
		}
	}
	if strings.HasPrefix(name, "pg_") {
		return fmt.Errorf("schema name %q: the pg_ prefix is reserved by PostgreSQL", name)
	}
	return nil
}

// QuoteSchema validates name and returns it quoted as an SQL identifier.
func QuoteSchema(name string) (string, error) {
	if err := ValidateSchema(name); err != nil {
		return "", err
	}
	return pgx.Identifier{name}.Sanitize(), nil
}

// Render returns the text of text with every {{schema}} replaced by the quoted schema.
// The schema must already be validated (see [QuoteSchema]).
func Render(text, quotedSchema string) string {
	return strings.ReplaceAll(text, "{{schema}}", quotedSchema)
}

var cache sync.Map // "name\x00schema" -> rendered SQL

// include is how a query takes in a part shared with others: {{include name}} stands for
// the text of queries/<name>.sql.
var include = regexp.MustCompile(`\{\{include ([a-z_]+)\}\}`)

// Query returns the named query from queries/<name>.sql, with its includes expanded,
// rendered for quotedSchema. It panics on an unknown name: the set of queries is fixed
// at compile time.
func Query(name, quotedSchema string) string {
	key := name + "\x00" + quotedSchema
	if s, ok := cache.Load(key); ok {
		return s.(string)
	}
	s := Render(text(name), quotedSchema)
	cache.Store(key, s)
	return s
}

// text returns queries/<name>.sql with its includes expanded, and theirs in turn.
func text(name string) string { return expand(read(name), 0) }

// maxIncludeDepth bounds how deep parts include parts (a cycle would never end).
const maxIncludeDepth = 4

// expand replaces each include of s, depth parts deep, with the part's text, expanded.
func expand(s string, depth int) string {
	if depth > maxIncludeDepth {
		panic("sqlq: includes nested deeper than " + strconv.Itoa(maxIncludeDepth) + " (a cycle?)")
	}
	return include.ReplaceAllStringFunc(s, func(m string) string {
		return expand(part(read(include.FindStringSubmatch(m)[1])), depth+1)
	})
}

// read returns queries/<name>.sql as written.
func read(name string) string {
	b, err := files.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("sqlq: unknown query %q", name))
	}
	return string(b)
}

// part is an included file as it goes into the including statement: without its header
// comment (the lines before the first that is not a comment, which describe the file)
// and without its final newline, so it can stand inside a line.
func part(text string) string {
	for strings.HasPrefix(text, "--") {
		_, rest, _ := strings.Cut(text, "\n")
		text = rest
	}
	return strings.TrimRight(text, "\n")
}

// NotifyParams holds notify.sql's parameters, bound by name: the wake-up channel and
// the payload. The root package's Notifier and the relay share it (notify.sql names no
// schema: bind it with "").
type NotifyParams struct {
	Channel string `sql:"channel"`
	Payload string `sql:"payload"`
}
