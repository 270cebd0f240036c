// Package cdc relays an outbox's events as the WAL announces them: change data capture
// over PostgreSQL's logical replication (the pgoutput plugin, read with
// github.com/jackc/pglogrepl), as the third way to wake a relay besides polling and
// LISTEN/NOTIFY.
//
// The WAL discovers; the table keeps the state (docs/adr/0026-cdc-discovers-the-table-keeps-the-state.md). A [Source] reads
// the inserts into the schema's events table from a replication slot, and hands the seqs
// of each committed transaction to a running [relay.Relay] ([relay.Relay.PublishSeqs]),
// which claims them by seq — a primary-key lookup each instead of a walk of the pending
// indexes — and publishes, classifies and settles them like any batch: retries,
// backoff, dead letters, the breaker, fencing, pauses and the Observer are the relay's.
// Whatever it cannot publish at once (an aggregate held by an earlier pending or dead
// event, a scheduled event, another relay's partition) stays pending in the table, and
// the relay's own polling publishes it in order. The Source confirms to PostgreSQL a
// transaction's end only once every event of it is settled, so a crash re-reads what
// was not, and the by-seq claim finds it still pending: duplicates, never a loss.
//
// Producers need no Notifier and no trigger: the relay can run with [relay.WakeupPoll]
// and a long PollInterval (the time within which the polling claims take up what CDC
// left, and everything when the slot is gone).
//
// Slot safety: the Source refuses a server whose wal_level is not logical, creates its
// publication and slot when they do not exist (saying so: events committed before the
// slot's start are the polling claims'), never recreates a slot that was invalidated
// ([ErrSlotLost]: the relay's polling still publishes everything, from the table),
// waits with backoff while another reader holds the slot, and confirms the server's WAL
// position while idle, so that an idle events table does not pin the WAL of the rest of
// the cluster. [Source.Stats] reports the slot's retained WAL and state.
package cdc
