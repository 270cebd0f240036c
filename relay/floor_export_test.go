package relay

import "time"

// FloorOf returns the seq r's claims read the pending rows from (tests only).
func FloorOf(r *Relay) int64 {
	f := &r.batches.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq
}

// NoFullClaims turns off r's claim from the first row every floorFullEvery (tests
// only): what a test checks then cannot owe anything to that safety net.
func NoFullClaims(r *Relay) {
	f := &r.batches.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.lastFull {
		f.lastFull[i] = time.Now().Add(100 * 365 * 24 * time.Hour)
	}
}

// NextClaim returns r's claim statement and the arguments of its next claim over all
// partitions, from r's floor, or from the first row when fromFloor is false (tests
// only).
func NextClaim(r *Relay, fromFloor bool) (string, []any) {
	f := &r.batches.floor
	f.mu.Lock()
	fa := floorArgs{floor: f.seq, replays: f.replays}
	f.mu.Unlock()
	if !fromFloor {
		fa.floor = 0
	}
	return r.batches.q.claim.sql, r.batches.q.claim.args(r.batches.claimQuery(r.batches.scope(nil, workerShare{}), fa))
}

// FullClaimNow makes r's next claim read from the first row (tests only).
func FullClaimNow(r *Relay) {
	f := &r.batches.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastFull = [maxWorkers]time.Time{}
}

// OrderedClaimArgs are the parameters of an ordered claim, for tests that run one by
// hand (OrderedClaimSQL).
type OrderedClaimArgs struct {
	Scope                  []int
	Heads, MaxPerAggregate int
	PublishPastDead        []string
	MaxEvents, Partitions  int
	CursorTypes            []string
	CursorIDs              []string
	LimitTypes             []string
	Limits                 []int
}

// OrderedClaimSQL returns the ordered claim statement name (claim_ordered or
// claim_ordered_delete) as the relay binds it, and the arguments of a, from the first
// row (tests only).
func OrderedClaimSQL(name string, a OrderedClaimArgs) (string, []any) {
	s := bindClaim(Ordered, name, `"outbox"`)
	return s.sql, s.args(claimQuery{ordered: &orderedClaim{
		Scope: a.Scope, Heads: a.Heads, MaxPerAggregate: a.MaxPerAggregate, PublishPastDead: a.PublishPastDead,
		MaxEvents: a.MaxEvents, Partitions: a.Partitions, CursorTypes: a.CursorTypes, CursorIDs: a.CursorIDs,
		LimitTypes: a.LimitTypes, Limits: a.Limits,
	}})
}
