package inbox

import (
	"github.com/google/uuid"
)

// idempotencyNamespace is the UUIDv5 namespace of idempotency keys. Fixed forever: a
// changed namespace would change every key, and an external API would then apply again
// what it applied before.
var idempotencyNamespace = uuid.MustParse("0b9e6a3e-6f1d-5c5e-9a0c-6f7574626f78")

// IdempotencyKey returns a stable key for an external side effect (a payment, an
// e-mail) of consumer's handling of event eventID: a UUIDv5 of both, the same in every
// process and on every redelivery, and different for another consumer of the same event.
// Send it as the API's idempotency key (an Idempotency-Key header, say): an effect
// outside the database cannot commit with the inbox's record, so when a crash after the
// call makes the event come again, the API recognises the key and does not repeat it.
func IdempotencyKey(consumer string, eventID uuid.UUID) string {
	name := make([]byte, 0, len(consumer)+1+16)
	name = append(name, consumer...)
	name = append(name, 0) // a consumer name holds no NUL: the split is unambiguous
	name = append(name, eventID[:]...)
	return uuid.NewSHA1(idempotencyNamespace, name).String()
}

// IdempotencyKey returns [IdempotencyKey] for this consumer and event eventID.
func (c *Consumer) IdempotencyKey(eventID uuid.UUID) string { return IdempotencyKey(c.name, eventID) }
