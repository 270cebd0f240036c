// Package orders is the producing half of the example: an order service that writes
// each new order and its OrderPlaced event in one PostgreSQL transaction (pgx and
// outbox.Enqueue), wakes the relay with an outbox.Notifier once the transaction has
// committed, serves a small JSON API over HTTP, and relays the events to NATS
// JetStream.
//
// The pieces stand alone so that a program can take what it needs:
//
//   - [Migrate] creates the outbox schema and the orders table.
//   - [Service] places and reads orders; [Service.PlaceOrder] is the transactional
//     outbox's write path.
//   - [NewHandler] is the HTTP API: POST /orders and GET /orders/{id}.
//   - [EnsureStream] and [NewRelay] publish the events to JetStream.
//   - [Run] runs all of it until its context ends; cmd/orders is a main around it.
//
// The events are the contract with consumers: [EventOrderPlaced], [OrderPlaced] and
// [Stream].
package orders
