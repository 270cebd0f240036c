// Package observe holds the benchmark of the relay's observability cost: relays
// draining a backlog with metrics (outboxprom) and tracing (outboxotel, a span a message
// or a span a Publish call) off, on, and both, in one run (BenchmarkObservabilityAB),
// measured in events/s and in CPU time an event (the relays' process and the database
// cluster's). It has no code of its own.
package observe
