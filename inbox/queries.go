package inbox

import "github.com/outboxkit/outbox/internal/sqlq"

// queries holds the inbox's SQL, rendered for its schema, each statement bound to its
// parameter struct; each field names its file in internal/sqlq/queries.
type queries struct {
	record         sqlq.Statement[recordParams]
	outcome        sqlq.Statement[outcomeParams]
	versionLock    sqlq.Statement[versionLockParams]
	versionSet     sqlq.Statement[versionSetParams]
	parkedAfter    sqlq.Statement[parkedAfterParams]
	unpark         sqlq.Statement[unparkParams]
	park           sqlq.Statement[storedEvent]
	quarantine     sqlq.Statement[quarantineParams]
	quarantineTake sqlq.Statement[eventKey]
	quarantineList sqlq.Statement[quarantineListParams]
	purge          sqlq.Statement[purgeParams]

	savepoint, rollbackTo string
	release               string
}

func newQueries(quoted string) *queries {
	return &queries{
		record:         sqlq.Bind[recordParams]("inbox_record", quoted),
		outcome:        sqlq.Bind[outcomeParams]("inbox_outcome", quoted),
		versionLock:    sqlq.Bind[versionLockParams]("inbox_version_lock", quoted),
		versionSet:     sqlq.Bind[versionSetParams]("inbox_version_set", quoted),
		parkedAfter:    sqlq.Bind[parkedAfterParams]("inbox_parked_after", quoted),
		unpark:         sqlq.Bind[unparkParams]("inbox_unpark", quoted),
		park:           sqlq.Bind[storedEvent]("inbox_park", quoted),
		quarantine:     sqlq.Bind[quarantineParams]("inbox_quarantine", quoted),
		quarantineTake: sqlq.Bind[eventKey]("inbox_quarantine_take", quoted),
		quarantineList: sqlq.Bind[quarantineListParams]("inbox_quarantine_list", quoted),
		purge:          sqlq.Bind[purgeParams]("inbox_purge", quoted),
		// The handler runs in a savepoint, so that a panic or a permanent error rolls
		// back its work only, and the quarantine record commits.
		savepoint:  "SAVEPOINT outbox_inbox_handler",
		rollbackTo: "ROLLBACK TO SAVEPOINT outbox_inbox_handler",
		release:    "RELEASE SAVEPOINT outbox_inbox_handler",
	}
}
