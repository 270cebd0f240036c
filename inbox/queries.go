package inbox

import "github.com/outboxkit/outbox/internal/sqlq"

// queries holds the inbox's SQL, rendered for its schema; each field names its file in
// internal/sqlq/queries.
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
	q := func(name string) string { return sqlq.Query(name, quoted) }
	return &queries{
		record: q("inbox_record"), outcome: q("inbox_outcome"),
		versionLock: q("inbox_version_lock"), versionSet: q("inbox_version_set"),
		parkedAfter: q("inbox_parked_after"), unpark: q("inbox_unpark"),
		park: q("inbox_park"), quarantine: q("inbox_quarantine"),
		quarantineTake: q("inbox_quarantine_take"),
		quarantineList: q("inbox_quarantine_list"), purge: q("inbox_purge"),
		// The handler runs in a savepoint, so that a panic or a permanent error rolls
		// back its work only, and the quarantine record commits.
		savepoint:  "SAVEPOINT outbox_inbox_handler",
		rollbackTo: "ROLLBACK TO SAVEPOINT outbox_inbox_handler",
		release:    "RELEASE SAVEPOINT outbox_inbox_handler",
	}
}
