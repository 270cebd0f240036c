package inbox_test

import (
	"testing"

	"github.com/outboxkit/outbox/inbox"
)

// Every event of an aggregate goes to one worker, and aggregates spread over all of them.
func TestShard(t *testing.T) {
	t.Parallel()
	const n = 8
	used := make(map[int]bool)
	for i := range 1000 {
		id := string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		w := inbox.Shard("order", id, n)
		if w < 0 || w >= n {
			t.Fatalf("Shard(order, %s, %d) = %d", id, n, w)
		}
		if again := inbox.Shard("order", id, n); again != w {
			t.Fatalf("order/%s went to worker %d, then %d", id, w, again)
		}
		used[w] = true
	}
	if len(used) != n {
		t.Fatalf("1,000 aggregates used %d of %d workers", len(used), n)
	}
	if inbox.Shard("ab", "c", 1<<20) == inbox.Shard("a", "bc", 1<<20) {
		t.Fatal(`"ab"/"c" and "a"/"bc" share a worker: type and id are not separated`)
	}
}
