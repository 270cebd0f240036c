package inbox_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/inbox"
)

// The key is stable (a fixed value for fixed inputs: it must never change between
// releases), and differs per consumer and per event.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")
	const want = "137952a4-1307-537b-bbcb-f5a15c8d6a5c"
	got := inbox.IdempotencyKey("payments", id)
	if got != inbox.IdempotencyKey("payments", id) {
		t.Fatal("not stable")
	}
	if got == inbox.IdempotencyKey("payments2", id) || got == inbox.IdempotencyKey("payments", uuid.New()) {
		t.Fatal("the same key for another consumer or event")
	}
	if got != want {
		t.Fatalf("IdempotencyKey = %s; the golden value is %s (changing it repeats external effects)", got, want)
	}
	c, err := inbox.New(&inbox.Config{Name: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	if c.IdempotencyKey(id) != got {
		t.Fatal("Consumer.IdempotencyKey differs")
	}
}
