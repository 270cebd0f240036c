package outbox

import "testing"

// Encoding an event without a topic or trace parent allocates nothing for them: the
// arrays statement encodes two of them per event, and nonEmpty used to move its
// argument to the heap on every call (2 allocations per event of a batch).
func TestAbsentOptionalColumnsDoNotAllocate(t *testing.T) {
	var sink *string
	if n := testing.AllocsPerRun(100, func() { sink = nonEmpty("") }); n != 0 {
		t.Errorf("nonEmpty(\"\") allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { sink = nonEmpty("x") }); n != 1 {
		t.Errorf("nonEmpty(\"x\") allocates %v times per call, want 1 (its copy)", n)
	}
	_ = sink
	e := Event{AggregateType: "a", AggregateID: "1", EventType: "e", ContentType: "application/json"}
	if n := testing.AllocsPerRun(100, func() { _ = optionalColumns(&e) }); n != 0 {
		t.Errorf("the optional columns of an event that has none allocate %v times, want 0", n)
	}
}
