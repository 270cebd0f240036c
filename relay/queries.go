package relay

import "github.com/outboxkit/outbox/internal/sqlq"

// queries holds the relay's SQL, rendered for its schema. Each field names its file in
// internal/sqlq/queries; where the file depends on the mode and the retention, the
// tables below say which.
type queries struct {
	claim, poisonCandidates claimStatement    // claimQueries, poisonCandidateQueries
	claimSeqs               seqClaimStatement // seqClaimQueries (seqs.go)
	probe                   sqlq.Statement[probeParams]
	settle                  string // settleKeep's or settleDelete's, by the retention (settleArgs binds them)
	settleKeep              sqlq.Statement[rowOutcomes]
	settleDelete            sqlq.Statement[deletedRows]
	settleLate              sqlq.Statement[lateSettle]
	poisonTry               sqlq.Statement[seqsParams] // poisonTryQueries
	poisonPark              sqlq.Statement[poisonParkParams]
	poisonBySize            sqlq.Statement[seqsParams]
	fence                   sqlq.Statement[fenceParams]
	config                  sqlq.Statement[configParams]
	notify                  sqlq.Statement[sqlq.NotifyParams] // wakes the schema's relays
	purge                   sqlq.Statement[purgeParams]
	purgeNext               sqlq.Statement[purgeNextParams]
	purgeLock               sqlq.Statement[purgeLockParams]
	leaseInit               sqlq.Statement[leaseInitParams]
	leaseBeat               sqlq.Statement[beatParams]
	leaseAcquire            sqlq.Statement[acquireParams]
	leaseRelease            sqlq.Statement[releaseParams]
	leaseNextExpiry         sqlq.Statement[ownerParams]
	emittedBehind           sqlq.Statement[behindParams] // emitted.go
	emittedWrite            sqlq.Statement[emittedRows]
}

// deletes reports whether the claims of a retention mode delete what they claim.
func deletes(m RetentionMode) bool { return m == DeleteOnPublish }

// The claim of each mode and kind of claim (false: mark published, true: delete): it
// marks (or deletes) what it claims as published; what the sink does not take is put
// back by the settle statement of the same kind (settle_keep.sql, settle_delete.sql)
// before the commit (ADR 0004).
var (
	claimQueries = map[Mode]map[bool]string{
		Ordered:   {false: "claim_ordered", true: "claim_ordered_delete"},
		Unordered: {false: "claim_unordered", true: "claim_unordered_delete"},
	}
	poisonCandidateQueries = map[Mode]string{Ordered: "poison_candidates_ordered", Unordered: "poison_candidates_unordered"}
	poisonTryQueries       = map[bool]string{false: "poison_try_keep", true: "poison_try_delete"}
)

// newQueries renders the relay's queries for cfg (defaults filled in) and quoted, its
// schema quoted.
func newQueries(cfg *Config, quoted string) *queries {
	del := deletes(cfg.Retention.Mode)
	keep, deleted := sqlq.Bind[rowOutcomes]("settle_keep", quoted), sqlq.Bind[deletedRows]("settle_delete", quoted)
	settle := keep.SQL
	if del {
		settle = deleted.SQL
	}
	return &queries{
		claim:            bindClaim(cfg.Mode, claimQueries[cfg.Mode][del], quoted),
		poisonCandidates: bindClaim(cfg.Mode, poisonCandidateQueries[cfg.Mode], quoted),
		claimSeqs:        bindSeqClaim(cfg, quoted),
		probe:            sqlq.Bind[probeParams]("probe", quoted),
		notify:           sqlq.Bind[sqlq.NotifyParams]("notify", ""),
		settle:           settle,
		settleKeep:       keep,
		settleDelete:     deleted,
		settleLate:       sqlq.Bind[lateSettle]("settle_late", quoted),
		poisonTry:        sqlq.Bind[seqsParams](poisonTryQueries[del], quoted),
		poisonPark:       sqlq.Bind[poisonParkParams]("poison_park", quoted),
		poisonBySize:     sqlq.Bind[seqsParams]("poison_by_size", quoted),
		fence:            sqlq.Bind[fenceParams]("fence", quoted),
		config:           sqlq.Bind[configParams]("relay_config", quoted),
		purge:            sqlq.Bind[purgeParams]("purge", quoted),
		purgeNext:        sqlq.Bind[purgeNextParams]("purge_next", quoted),
		purgeLock:        sqlq.Bind[purgeLockParams]("purge_lock", quoted),
		leaseInit:        sqlq.Bind[leaseInitParams]("lease_init", quoted),
		leaseBeat:        sqlq.Bind[beatParams]("lease_beat", quoted),
		leaseAcquire:     sqlq.Bind[acquireParams]("lease_acquire", quoted),
		leaseRelease:     sqlq.Bind[releaseParams]("lease_release", quoted),
		leaseNextExpiry:  sqlq.Bind[ownerParams]("lease_next_expiry", quoted),
		emittedBehind:    sqlq.Bind[behindParams]("emitted_behind", quoted),
		emittedWrite:     sqlq.Bind[emittedRows]("emitted_write", quoted),
	}
}
