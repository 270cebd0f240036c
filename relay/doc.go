// Package relay publishes committed outbox events to an [outbox.Sink], at least once,
// in order per aggregate in Ordered mode (the default).
//
// # The states of an event
//
//	          claim (marks it published, in the open transaction)
//	pending ─────────────────────────────────────────────► published
//	   ▲  │                                                    (kept for Retention.Keep, then purged)
//	   │  │ settle: the sink did not take it
//	   │  ├─► pending again: retry (after a backoff, the attempt counted),
//	   │  │                  deferred (the sink down for it, no attempt counted),
//	   │  │                  untouched (never sent)
//	   │  └─► dead (refused for good, out of attempts, or a row no claim can read):
//	   │        holds its aggregate in Ordered mode
//	   └───── Replay (with an actor and a reason)   Discard ──► discarded (dead, holds nothing)
//
// # One batch, one transaction
//
// A worker runs batches: claim → publish → classify → settle, one transaction each
// (docs/adr/0004). The claim locks a bounded batch of pending events and marks them
// published in the open transaction; the relay publishes them (the batch's aggregates
// spread over concurrent Publish calls); classify decides each message's outcome from
// the sink's result — published, retry, deferred, untouched, dead — and whether the sink
// as a whole is down (then the transaction rolls back, nothing is counted, and a breaker
// keeps the relay off the sink); settle puts back, in the same transaction, the rows
// whose messages were not published; then the transaction commits. A crash anywhere
// before the commit rolls the claim back, so the events are published again: at least
// once, never lost.
//
// In Ordered mode an event is claimed only when it is its aggregate's head, so the first
// delivery of each event of one aggregate follows write order, also when a publish fails
// mid-batch, and relays share the partitions by lease (docs/adr/0005), checked before
// every commit. A row that makes every claim including it fail is found and parked dead
// (docs/adr/0007).
//
// # Parts
//
// [Relay] composes: its workers and the batcher (the batch pipeline), the lease keeper
// (membership among the schema's relays and, in Ordered mode, the partition leases), the
// purger (retention) and the listener (notifications become wake-ups). Every background
// loop waits through one cancellable wait and bounds each of its queries by a timeout.
package relay
