// Package inbox makes each event's effect happen once on the consuming side, although
// brokers deliver at least once.
//
// [Consumer.Process] runs a message's handler in a transaction that first records
// (consumer, event id) in the inbox table: a second delivery of the event — later, or
// at the same moment in another process — finds the record and is skipped as a
// [Duplicate]. The record and the handler's database work commit together, and the
// caller acks the broker only after Process returned without an error: a crash before
// the commit leaves nothing, so the redelivery applies the event; a crash after it
// leaves the record, so the redelivery is a no-op.
//
// # Versions
//
// An event with an AggregateVersion is checked against the last version applied for
// its aggregate (per consumer), under a row lock, so the version never goes backwards:
// an event at or below it is [Stale] and skipped; the next version is applied; one past
// a gap is handled by the [GapPolicy]: applied anyway ([GapApply]), refused with a
// retryable [GapError] ([GapRetry]), or stored ([GapPark]) and applied in the
// transaction of the event that closes the gap, in version order. An aggregate never
// seen before has last version 0 ([FirstVersionOne]), or takes its first event as the
// starting point ([FirstVersionAny]).
//
// # Quarantine
//
// An event whose (event type, schema version) the consumer does not accept
// ([Config.Accept]), whose handler panics, or whose handler returns an error marked with
// [outbox.Permanent] is stored in the quarantine with the reason, and acked: it does not
// block the broker. Its aggregate's version does not move past it, so under GapPark the
// aggregate's later events wait in the park. [Consumer.Quarantined] lists the
// quarantine; [Consumer.Replay] runs a quarantined event again (after the fix).
//
// # Metrics
//
// [Consumer.Stats] counts what a consumer did; [Config.Observer] is told what each call
// did — outcome, counts, handler time, lag — for a metrics exporter, in the shape of the
// relay's Observer.
//
// # Schema
//
// The tables come from package outboxmigrate's inbox set, which needs none of the
// outbox's tables: a service that only consumes migrates with
// outboxmigrate.Config{Sets: []outboxmigrate.Set{outboxmigrate.SetInbox}}.
// docs/inbox.md describes the whole design.
package inbox
