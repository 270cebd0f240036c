package relay

import (
	"math"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// typeRates bounds how many events of some aggregate types the relay claims a second
// (Config.TypeRates, ADR 0040): a token bucket per type, shared by the relay's workers.
// The rate is the schema's relays' together: each live relay takes an equal part. A
// bucket holds at most a tenth of a second of its rate (at least one event), so a type
// that waited gets no burst larger than that; a claim may take more than the bucket
// holds (its heads bring up to MaxPerAggregate events each), and the debt keeps the
// type out of the claims until it is paid.
type typeRates struct {
	rates map[string]float64 // aggregate type → events a second, the schema's relays together

	mu      sync.Mutex
	buckets map[string]*tokenBucket
}

// tokenBucket is what a type may still claim: tokens events (negative: the debt of a
// claim that took more) as of at.
type tokenBucket struct {
	tokens float64
	at     time.Time
}

// rateAllowance is what the rate-limited types may take in the next claim.
type rateAllowance struct {
	skip     []string // types with nothing to take: the claim leaves them out
	capTypes []string // types with something to take, and
	caps     []int    // the most heads of each (claim_ordered_pick.sql's @cap_types, @caps)
}

// bound returns the types whose heads in msgs (a claimed batch) reached their caps:
// their rates held them back, not the claim, and a claim at once would find their
// buckets empty.
func (a rateAllowance) bound(msgs []outbox.Message) []string {
	if len(a.capTypes) == 0 {
		return nil
	}
	heads := map[string]int{}
	counted := map[aggregateKey]bool{}
	for _, m := range msgs {
		if k := keyOf(m); !counted[k] {
			counted[k] = true
			heads[m.AggregateType]++
		}
	}
	var bound []string
	for i, t := range a.capTypes {
		if heads[t] >= a.caps[i] {
			bound = append(bound, t)
		}
	}
	return bound
}

func newTypeRates(rates map[string]float64) *typeRates {
	if len(rates) == 0 {
		return nil
	}
	return &typeRates{rates: rates, buckets: make(map[string]*tokenBucket, len(rates))}
}

// bucketSize is how many events a bucket of rate (a second) holds at most.
func bucketSize(rate float64) float64 { return max(1, rate/10) }

// fill brings t's bucket up to now at rate, and returns it.
func (r *typeRates) fill(t string, rate float64, now time.Time) *tokenBucket {
	b := r.buckets[t]
	if b == nil {
		b = &tokenBucket{tokens: bucketSize(rate), at: now}
		r.buckets[t] = b
	}
	if now.After(b.at) {
		b.tokens = min(bucketSize(rate), b.tokens+rate*now.Sub(b.at).Seconds())
		b.at = now
	}
	return b
}

// allowance returns what the next claim of one of relays live relays may take of each
// rate-limited type at now, when each of its heads brings at most perHead events. A nil
// typeRates allows everything.
func (r *typeRates) allowance(now time.Time, relays, perHead int) rateAllowance {
	var a rateAllowance
	if r == nil {
		return a
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, total := range r.rates {
		rate := total / float64(max(1, relays))
		b := r.fill(t, rate, now)
		if b.tokens < 1 {
			a.skip = append(a.skip, t)
			continue
		}
		heads := max(1, int(math.Floor(b.tokens/float64(max(1, perHead)))))
		a.capTypes, a.caps = append(a.capTypes, t), append(a.caps, heads)
	}
	return a
}

// took charges each rate-limited type with the events msgs (a claimed batch) hold of it.
func (r *typeRates) took(msgs []outbox.Message) {
	if r == nil || len(msgs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if _, ok := r.rates[m.AggregateType]; !ok {
			continue
		}
		if b := r.buckets[m.AggregateType]; b != nil {
			b.tokens--
		}
	}
}

// refilled returns when the first of types (rate-limited types a claim left out or took
// as much of as it could) has a full bucket again, for one of relays live relays: an idle
// relay claims them then.
func (r *typeRates) refilled(types []string, relays int, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, t := range types {
		rate := r.rates[t] / float64(max(1, relays))
		b := r.fill(t, rate, now)
		// at most an hour away (a rate of one event a day): the relay looks again then
		at := now.Add(time.Duration(min((bucketSize(rate)-b.tokens)/rate, time.Hour.Seconds()) * float64(time.Second)))
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}
