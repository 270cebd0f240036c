// Package inventory is the consuming half of the example: it applies each
// order.placed event of package orders to a stock table (the order's quantity is taken
// off its SKU) through package inbox, so that the effect happens once per event even
// when JetStream delivers it again, and it feeds the inbox from a JetStream pull
// consumer with natssink's Runner.
//
//   - [Migrate] creates the inbox tables and the stock table.
//   - [Consumer] is the event handler and its inbox consumer; [Consumer.Process]
//     applies one message.
//   - [EnsureConsumer] and [Consumer.NewRunner] wire it to JetStream.
//   - [Run] runs all of it, with a small HTTP API (GET /stock/{sku}); cmd/inventory
//     is a main around it.
package inventory
