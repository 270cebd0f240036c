package sinkformat

import (
	"context"

	"github.com/outboxkit/outbox"
)

// Plan orders one Publish call for a sink that pipelines: each wave holds the next
// message of every aggregate that has not failed, so a sink can send a whole wave
// before waiting for its acks, and never sends a message of an aggregate whose
// earlier message failed. Messages of one aggregate go out one wave after another, in
// the order of msgs. When the call needs no order ([outbox.OrderNeeded] false), every
// message is a wave's only aggregate: the first wave is the whole call and a failure
// stops nothing else. A Plan is not safe for concurrent use.
type Plan struct {
	errs    []error
	queues  [][]int // per aggregate, in order of first appearance: message indexes in order
	stop    []int   // per queue: the position of its first failure, or len(queue)
	queueOf []int   // message index → queue
	posOf   []int   // message index → position in its queue
	wave    int
}

// Aggregates groups msgs by aggregate: the indexes (into msgs) of each aggregate's
// messages in the order of msgs, one group per aggregate in the order of first
// appearance — for a sink that sends each aggregate's messages one after another and
// the aggregates at once. When the call needs no order ([outbox.OrderNeeded] false),
// each message is a group of its own.
func Aggregates(ctx context.Context, msgs []outbox.Message) [][]int {
	var groups [][]int
	if !outbox.OrderNeeded(ctx) {
		groups = make([][]int, len(msgs))
		for i := range msgs {
			groups[i] = []int{i}
		}
		return groups
	}
	index := make(map[[2]string]int)
	for i := range msgs {
		k := [2]string{msgs[i].AggregateType, msgs[i].AggregateID}
		g, ok := index[k]
		if !ok {
			g = len(groups)
			index[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// NewPlan plans the publication of msgs by a Publish call with ctx.
func NewPlan(ctx context.Context, msgs []outbox.Message) *Plan {
	p := &Plan{errs: make([]error, len(msgs)), queueOf: make([]int, len(msgs)), posOf: make([]int, len(msgs))}
	p.queues = Aggregates(ctx, msgs)
	for q, queue := range p.queues {
		for pos, i := range queue {
			p.queueOf[i], p.posOf[i] = q, pos
		}
	}
	p.stop = make([]int, len(p.queues))
	for q := range p.queues {
		p.stop[q] = len(p.queues[q])
	}
	return p
}

// Next returns the indexes (into msgs) of the next wave, in the order of msgs, or nil
// when nothing is left to send.
func (p *Plan) Next() []int {
	var wave []int
	for q, queue := range p.queues {
		if p.wave < p.stop[q] {
			wave = append(wave, queue[p.wave])
		}
	}
	p.wave++
	return wave
}

// Fail records err as message i's result. The later messages of its aggregate are not
// sent: their result is [outbox.ErrNotSent] — or err itself when it is marked
// [outbox.Unavailable], so that every message of a call that met an outage says so.
func (p *Plan) Fail(i int, err error) {
	p.errs[i] = err
	q, pos := p.queueOf[i], p.posOf[i]
	if pos >= p.stop[q] {
		return
	}
	later := outbox.ErrNotSent
	if outbox.IsUnavailable(err) {
		later = err
	}
	for _, j := range p.queues[q][pos+1 : p.stop[q]] {
		p.errs[j] = later
	}
	p.stop[q] = pos
}

// FailRest records err as the result of the wave Next returned last and of every later
// one — when ctx ends or the broker goes away before that wave is sent.
func (p *Plan) FailRest(err error) {
	from := max(p.wave-1, 0)
	for q, queue := range p.queues {
		for _, i := range queue[min(from, p.stop[q]):p.stop[q]] {
			p.errs[i] = err
		}
		p.stop[q] = min(p.stop[q], from)
	}
}

// Errors returns one result per message: nil for those neither failed nor stopped.
func (p *Plan) Errors() []error { return p.errs }
