package sqlq

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Statement is a query whose parameters are named (@name in its .sql file) and bound to
// the fields of the struct P by their `sql:"name"` tags, so the SQL and the Go that fills
// it meet by name, not by position. Binding rewrites each @name to the $n PostgreSQL
// reads, once, when the statement is made; [Statement.Args] then lists a P's fields in
// that order. Every field of P must be exported and tagged, and used by the query, and
// every parameter of the query must name a field: a mismatch panics in [Bind], as an
// unknown query name does in [Query] (both are fixed at compile time, and tests make
// every statement). A struct field tagged `sql:",inline"` stands for its own fields, so
// statements that share columns can share the struct that holds them.
type Statement[P any] struct {
	// SQL is the rendered query, with $1, $2, … in place of the names.
	SQL string
	// fields are the index paths of P's fields in parameter order ($1 first).
	fields [][]int
}

// Bind returns the named query (see [Query]) rendered for quotedSchema, with its
// parameters bound to the fields of P.
func Bind[P any](name, quotedSchema string) Statement[P] {
	return BindText[P](name, Query(name, quotedSchema))
}

// BindText is [Bind] for a query kept outside this package (a command's own .sql files),
// whose text the caller has read and rendered; name only labels its panics.
func BindText[P any](name, text string) Statement[P] {
	t := reflect.TypeFor[P]()
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("sqlq: query %s: parameters must be a struct, got %s", name, t))
	}
	byName := map[string][]int{}
	if err := tagged(t, nil, byName); err != nil {
		panic(fmt.Sprintf("sqlq: query %s: %v", name, err))
	}
	bound, names, err := bindNames(text)
	if err != nil {
		panic(fmt.Sprintf("sqlq: query %s: %v", name, err))
	}
	s := Statement[P]{SQL: bound, fields: make([][]int, len(names))}
	for n, param := range names {
		i, ok := byName[param]
		if !ok {
			panic(fmt.Sprintf("sqlq: query %s: parameter @%s names no field of %s", name, param, t))
		}
		s.fields[n] = i
		delete(byName, param)
	}
	if len(byName) > 0 {
		var unused []string
		for tag := range byName {
			unused = append(unused, tag)
		}
		slices.Sort(unused)
		panic(fmt.Sprintf("sqlq: query %s does not use the fields of %s tagged %s", name, t, strings.Join(unused, ", ")))
	}
	return s
}

// tagged adds the fields of the struct t (at index path at inside P) to byName by their
// sql tags, and those of its inline structs in turn.
func tagged(t reflect.Type, at []int, byName map[string][]int) error {
	for i := range t.NumField() {
		f := t.Field(i)
		path := append(slices.Clip(at), i)
		tag := f.Tag.Get("sql")
		if tag == ",inline" && f.Type.Kind() == reflect.Struct && f.IsExported() {
			if err := tagged(f.Type, path, byName); err != nil {
				return err
			}
			continue
		}
		if tag == "" || strings.HasPrefix(tag, ",") || !f.IsExported() {
			return fmt.Errorf("field %s.%s must be exported and carry a sql tag (a name, or ,inline on a struct)", t, f.Name)
		}
		if _, dup := byName[tag]; dup {
			return fmt.Errorf("two fields are tagged %q (the second in %s)", tag, t)
		}
		byName[tag] = path
	}
	return nil
}

// Args returns the fields of p as the statement's parameters, in $n order.
func (s Statement[P]) Args(p *P) []any {
	v := reflect.ValueOf(p).Elem()
	args := make([]any, len(s.fields))
	for n, path := range s.fields {
		args[n] = v.FieldByIndex(path).Interface()
	}
	return args
}

// bindNames replaces every @name in query (outside comments, string literals and quoted
// identifiers) with $n, numbering names in order of first use, and returns the names in
// that order. A positional $n in the query is an error: a statement is named throughout.
func bindNames(query string) (string, []string, error) {
	var b strings.Builder
	b.Grow(len(query))
	var names []string
	number := map[string]int{}
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == '-' && strings.HasPrefix(query[i:], "--"):
			end := strings.IndexByte(query[i:], '\n')
			if end < 0 {
				end = len(query) - i
			}
			b.WriteString(query[i : i+end])
			i += end
		case c == '\'' || c == '"':
			end := strings.IndexByte(query[i+1:], c)
			if end < 0 {
				return "", nil, fmt.Errorf("unterminated %c at byte %d", c, i)
			}
			b.WriteString(query[i : i+end+2])
			i += end + 2
		case c == '$' && i+1 < len(query) && isDigit(query[i+1]):
			return "", nil, fmt.Errorf("positional parameter at byte %d (%q): name it @name", i, query[i:min(len(query), i+4)])
		case c == '@' && i+1 < len(query) && isNameStart(query[i+1]):
			j := i + 1
			for j < len(query) && (isNameStart(query[j]) || isDigit(query[j])) {
				j++
			}
			name := query[i+1 : j]
			n, ok := number[name]
			if !ok {
				names = append(names, name)
				n = len(names)
				number[name] = n
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), names, nil
}

func isNameStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
