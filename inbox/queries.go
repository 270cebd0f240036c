package inbox

import "github.com/outboxkit/outbox/internal/sqlq"

// queries holds the inbox's SQL, rendered for its schema; each field names its file in
// internal/sqlq/queries (inbox_<field>.sql).
type queries struct {
	record, outcome         string
	versionLock, versionSet string
	parkedAfter, unpark     string
	park, quarantine        string
	quarantineTake          string
	quarantineList, purge   string
	savepoint, rollbackTo   string
	release                 string
}

func newQueries(quoted string) *queries {
	q := func(name string) string { return sqlq.Query("inbox_"+name, quoted) }
	return &queries{
		record: q("record"), outcome: q("outcome"),
		versionLock: q("version_lock"), versionSet: q("version_set"),
		parkedAfter: q("parked_after"), unpark: q("unpark"),
		park: q("park"), quarantine: q("quarantine"),
		quarantineTake: q("quarantine_take"),
		quarantineList: q("quarantine_list"), purge: q("purge"),
		// The handler runs in a savepoint, so that a panic or a permanent error rolls
		// back its work only, and the quarantine record commits.
		savepoint:  "SAVEPOINT outbox_inbox_handler",
		rollbackTo: "ROLLBACK TO SAVEPOINT outbox_inbox_handler",
		release:    "RELEASE SAVEPOINT outbox_inbox_handler",
	}
}
