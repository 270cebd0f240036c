package sinkformat_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

func agg(ids ...string) []outbox.Message {
	msgs := make([]outbox.Message, len(ids))
	for i, id := range ids {
		msgs[i] = outbox.Message{AggregateType: "order", AggregateID: id}
	}
	return msgs
}

func TestPlanWaves(t *testing.T) {
	t.Parallel()
	msgs := agg("a", "b", "a", "c", "a", "b")
	p := sinkformat.NewPlan(t.Context(), msgs)
	var waves [][]int
	for w := p.Next(); w != nil; w = p.Next() {
		waves = append(waves, w)
	}
	if want := [][]int{{0, 1, 3}, {2, 5}, {4}}; !reflect.DeepEqual(waves, want) {
		t.Fatalf("waves %v, want %v", waves, want)
	}
}

func TestPlanFailStopsTheAggregate(t *testing.T) {
	t.Parallel()
	errBad := errors.New("bad")
	p := sinkformat.NewPlan(t.Context(), agg("a", "b", "a", "b", "a"))
	p.Fail(3, errBad) // before it is sent: b's first message still goes
	if w := p.Next(); !reflect.DeepEqual(w, []int{0, 1}) {
		t.Fatalf("wave 1 = %v", w)
	}
	p.Fail(0, errBad)
	if w := p.Next(); w != nil {
		t.Fatalf("wave 2 = %v, want none: a failed, b's second message was refused", w)
	}
	errs := p.Errors()
	want := []error{errBad, nil, outbox.ErrNotSent, errBad, outbox.ErrNotSent}
	if fmt.Sprint(errs) != fmt.Sprint(want) {
		t.Fatalf("errors %v, want %v", errs, want)
	}
}

// After an outage every later message of the aggregate says so too.
func TestPlanUnavailableSpreads(t *testing.T) {
	t.Parallel()
	down := outbox.Unavailable(errors.New("down"))
	p := sinkformat.NewPlan(t.Context(), agg("a", "a", "a"))
	p.Next()
	p.Fail(0, down)
	for i, err := range p.Errors() {
		if !outbox.IsUnavailable(err) {
			t.Errorf("message %d: %v, want unavailable", i, err)
		}
	}
}

func TestPlanFailRest(t *testing.T) {
	t.Parallel()
	errGone := errors.New("gone")
	p := sinkformat.NewPlan(t.Context(), agg("a", "b", "a", "a"))
	p.Next() // sent and acked
	if w := p.Next(); !reflect.DeepEqual(w, []int{2}) {
		t.Fatalf("wave 2 = %v", w)
	}
	p.FailRest(errGone) // before wave 2 is sent
	if w := p.Next(); w != nil {
		t.Fatalf("a wave after FailRest: %v", w)
	}
	if errs := p.Errors(); fmt.Sprint(errs) != fmt.Sprint([]error{nil, nil, errGone, errGone}) {
		t.Fatalf("errors %v", errs)
	}
}

func TestAggregates(t *testing.T) {
	t.Parallel()
	msgs := agg("a", "b", "a", "c", "a", "b")
	msgs[3].AggregateType = "invoice" // same id, another type: another aggregate
	msgs = append(msgs, outbox.Message{AggregateType: "invoice", AggregateID: "a"})
	if got, want := sinkformat.Aggregates(t.Context(), msgs), [][]int{{0, 2, 4}, {1, 5}, {3}, {6}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Aggregates = %v, want %v", got, want)
	}
	if got := sinkformat.Aggregates(t.Context(), nil); got != nil {
		t.Fatalf("Aggregates(nil) = %v", got)
	}
}

// A call that needs no order is one wave, and a failure stops no other message.
func TestPlanWithoutOrder(t *testing.T) {
	t.Parallel()
	ctx := outbox.WithoutOrder(t.Context())
	p := sinkformat.NewPlan(ctx, agg("a", "b", "a", "a"))
	if w := p.Next(); !reflect.DeepEqual(w, []int{0, 1, 2, 3}) {
		t.Fatalf("wave 1 = %v, want the whole call", w)
	}
	errBad := errors.New("bad")
	p.Fail(0, errBad)
	if w := p.Next(); w != nil {
		t.Fatalf("wave 2 = %v, want none", w)
	}
	if errs := p.Errors(); fmt.Sprint(errs) != fmt.Sprint([]error{errBad, nil, nil, nil}) {
		t.Fatalf("errors %v: a failure stopped the aggregate's later messages", errs)
	}
	if got, want := sinkformat.Aggregates(ctx, agg("a", "b", "a")), [][]int{{0}, {1}, {2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Aggregates without order = %v, want %v", got, want)
	}
}
