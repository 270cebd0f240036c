package relay

import "errors"

// maxInterned bounds the distinct values a claim's textInterner keeps.
const maxInterned = 1024

// textInterner hands out one string per distinct value of a claim's low-cardinality text
// columns (aggregate type, event type, topic, content type), where scanning into a
// string would allocate one per row. It lives for one claim; one goroutine uses it.
type textInterner map[string]string

// column returns a scanner for one such column; set its dst before each row's Scan.
func (t textInterner) column() *internedText { return &internedText{seen: t} }

// internedText scans a text column into *dst, through its interner. pgx hands it the
// driver's bytes (pgtype.BytesScanner), valid only during the call.
type internedText struct {
	dst  *string
	seen textInterner
}

// ScanBytes implements pgtype.BytesScanner.
func (t *internedText) ScanBytes(v []byte) error {
	if v == nil {
		return errors.New("text column is NULL")
	}
	if s, ok := t.seen[string(v)]; ok { // the lookup does not allocate
		*t.dst = s
		return nil
	}
	s := string(v)
	if len(t.seen) < maxInterned {
		t.seen[s] = s
	}
	*t.dst = s
	return nil
}
