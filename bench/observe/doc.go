// Package observe holds the benchmark of the relay's observability cost: one relay
// draining a backlog with metrics (outboxprom) and tracing (outboxotel) off, on, and
// both, in one run (BenchmarkObservabilityAB). It has no code of its own.
package observe
