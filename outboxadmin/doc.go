// Package outboxadmin is the operator's window on an outbox schema: an [http.Handler]
// serving a JSON API and a dashboard (HTML pages that work without JavaScript).
//
// It shows the backlog (pending events, the oldest one's age, dead letters, blocked
// aggregates, counts per event type and per relay partition, the relays holding leases),
// lists and shows events, and replays or discards dead letters — one, or every one
// matching a filter in a single set-based statement — with the actor and the reason
// recorded in the replays table together with the filter and the ids affected.
//
// # Security
//
// Reading needs no credential; serve the handler on a private address (the outbox
// daemon listens on localhost by default). Every state-changing request needs the
// configured token — in an "Authorization: Bearer" header (API) or in the form's token
// field (dashboard) — compared in constant time, or is refused with 401; in read-only
// mode it is refused with 403. No cookie is ever set or read, so a cross-site page cannot
// make a browser send a credential (docs/adr/0021-admin-csrf.md). Request bodies are
// bounded (413), state-changing requests are rate limited (429), and payloads and header
// values are not shown unless [Options.ShowPayloads] is set.
//
// # API
//
//	GET  /api/status                     counts, ages, per type, per partition, relays
//	GET  /api/events?state=&event_type=&aggregate_type=&aggregate_id=&created_from=&created_to=&after=&limit=
//	GET  /api/dead                       dead letters (the events API with state=dead)
//	GET  /api/blocked?after=&limit=      aggregates held by dead events
//	GET  /api/events/{id}                one event, with its audit rows
//	GET  /api/audit?before=&limit=       the audit log, newest first
//	POST /api/replay                     {"filter":{…},"actor":"…","reason":"…","expect":N,"dry_run":false}
//	POST /api/discard                    the same, for discards
//	POST /api/events/{id}/replay         {"actor":"…","reason":"…"}
//	POST /api/events/{id}/discard        the same (also a pending event)
//
// Paths are under [Options.PathPrefix]. docs/admin.md describes every field.
package outboxadmin
