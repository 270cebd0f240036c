package leaktest

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestParse(t *testing.T) {
	g := parse(`goroutine 7 [chan receive]:
example.com/p.(*T).wait(...)
	/src/p/p.go:20
example.com/p.(*T).loop(0xc000010000)
	/src/p/p.go:12 +0x1d
created by example.com/p.Start in goroutine 1
	/src/p/p.go:5 +0x3a`)
	if g.top != "example.com/p.(*T).wait" || g.own != "example.com/p.(*T).loop" {
		t.Fatalf("top %q, own %q; want example.com/p.(*T).wait, example.com/p.(*T).loop", g.top, g.own)
	}
	// Started by sync.WaitGroup.Go: its own function is the one Go was given.
	g = parse(`goroutine 22 [chan receive]:
example.com/p.work()
	/src/p/p.go:30 +0x31
sync.(*WaitGroup).Go.func1()
	/usr/local/go/src/sync/waitgroup.go:258 +0x4a
created by sync.(*WaitGroup).Go in goroutine 21
	/usr/local/go/src/sync/waitgroup.go:238 +0x73`)
	if g.top != "example.com/p.work" || g.own != "example.com/p.work" {
		t.Fatalf("top %q, own %q; want example.com/p.work twice", g.top, g.own)
	}
}

// parked starts a goroutine that stands in parkedHere until the returned func ends it
// (and waits for it to end).
func parked(t *testing.T) (end func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { parkedHere(stop) })
	end = sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(end)
	return end
}

func parkedHere(stop chan struct{}) { <-stop }

func shortGrace(t *testing.T) {
	old := grace
	grace = 100 * time.Millisecond
	t.Cleanup(func() { grace = old })
}

// A goroutine left running is reported by its top function; one that ends within the
// grace period, or that an allowed prefix covers, is not.
func TestCheck(t *testing.T) {
	shortGrace(t)
	if err := Check(); err != nil {
		t.Fatalf("Check with nothing running: %v", err)
	}

	end := parked(t)
	err := Check()
	if err == nil || !strings.Contains(err.Error(), "1 × github.com/outboxkit/outbox/internal/leaktest.parkedHere (started: 1 by github.com/outboxkit/outbox/internal/leaktest.parked.func1)") {
		t.Fatalf("Check with a goroutine left: %v, want it listed by its top function and its own", err)
	}
	if err := Check("github.com/outboxkit/outbox/internal/leaktest.parkedHere"); err != nil {
		t.Fatalf("Check allowing the top function: %v", err)
	}
	if err := Check("github.com/outboxkit/outbox/internal/leaktest.parked.func"); err != nil {
		t.Fatalf("Check allowing the goroutine's own function: %v", err)
	}
	if err := Check("github.com/outboxkit/outbox/internal/leaktest.Other"); err == nil {
		t.Fatal("Check allowing another function: no error")
	}

	time.AfterFunc(20*time.Millisecond, end)
	if err := Check(); err != nil {
		t.Fatalf("Check with a goroutine that ends within the grace period: %v", err)
	}
}

func TestExit(t *testing.T) {
	shortGrace(t)
	var reported strings.Builder
	stderr = &reported
	t.Cleanup(func() { stderr = os.Stderr })
	if code := Exit(0); code != 0 {
		t.Fatalf("Exit(0) with nothing leaked = %d", code)
	}
	parked(t)
	if code := Exit(0); code != 1 {
		t.Fatalf("Exit(0) with a leak = %d, want 1", code)
	}
	if code := Exit(2); code != 2 {
		t.Fatalf("Exit(2) with a leak = %d, want 2 (the tests' code)", code)
	}
	if n := strings.Count(reported.String(), "× github.com/outboxkit/outbox/internal/leaktest.parkedHere"); n != 2 {
		t.Fatalf("the leak reported %d times, want 2:\n%s", n, reported.String())
	}
}
