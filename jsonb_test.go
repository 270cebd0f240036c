package outbox

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/pgtest"
)

// checkJSONB must agree with PostgreSQL: what it accepts, jsonb accepts, and what it
// refuses, jsonb refuses (so a refused payload never reaches, or aborts, the caller's
// transaction, and an accepted one never fails there).
func TestCheckJSONBAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(context.Background(), pgtest.ConnString(t, &pgtest.Options{Empty: true}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	cases := []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-1.5e10`, `"x"`, `{"a":[1,2,{"b":null}]}`,
		`"\\u0000"`, `"\\\\u0000"`, `"\u00e9"`, `"\ud83d\ude00"`, `"tab\tin"`, "\"é\"",
		`"\u0000"`, `"a\u0000"`, `{"\u0000":1}`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800x"`,
		`1e999999`, `1E-999999`, `[1e5000]`, `1e100`, `true1`, `{"a":1,}`, `[1 2]`, ``, ` `, "\xff",
		`"` + strings.Repeat("9", 20) + `"`, strings.Repeat("9", 17000), strings.Repeat("9", 140000), "0." + strings.Repeat("1", 17000), "0." + strings.Repeat("1", 16000), `12345678901234567890`,
	}
	for _, c := range cases {
		ours := checkJSONB([]byte(c))
		var ignored string
		_, pgErr := conn.Exec(context.Background(), "SELECT $1::text::jsonb", c)
		if pgErr != nil && strings.Contains(pgErr.Error(), "invalid byte sequence") {
			pgErr = nil // pgx refuses invalid UTF-8 text before PostgreSQL sees it; still a refusal
			ignored = "utf8"
			if ours == nil {
				t.Errorf("%q: we accept invalid UTF-8", c)
			}
			continue
		}
		_ = ignored
		if (ours == nil) != (pgErr == nil) {
			t.Errorf("%.40q: ours=%v postgres=%v", c, ours, pgErr)
		}
		if conn.IsClosed() {
			t.Fatal("connection closed")
		}
	}
}

func FuzzCheckJSONB(f *testing.F) {
	for _, s := range []string{`{"a":"\u0000"}`, `"\ud800\udc00"`, `[1e5]`, `{"x":[true,false,null]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = checkJSONB(b) // must not panic on any input
	})
}
