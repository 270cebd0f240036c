package sqlcwrite

import (
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/outboxmigrate"
)

// OutboxSchema returns the outbox set's migrations rendered for schema "outbox", one
// after another: the text of outbox_schema.sql, which sqlc reads to know the events
// table (its tests check the file is this text).
func OutboxSchema() (string, error) {
	m, err := outboxmigrate.New(&outboxmigrate.Config{Sets: []outboxmigrate.Set{outboxmigrate.SetOutbox}})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("-- Code generated from outboxmigrate's migrations (schema \"outbox\", the outbox set)\n")
	b.WriteString("-- by TestOutboxSchemaFile -update. DO NOT EDIT. sqlc reads it; outboxmigrate applies the real thing.\n")
	for _, mig := range m.Migrations() {
		fmt.Fprintf(&b, "\n-- migration %04d_%s\n\n%s\n", mig.Version, mig.Name, strings.TrimSpace(mig.SQL))
	}
	return b.String(), nil
}
