package proccpu

import (
	"os"
	"testing"
	"time"
)

// Process and Machine count the CPU time this test burns: the figures the benchmarks
// divide are read from the right fields.
func TestCountsBurnedCPU(t *testing.T) {
	self0, err := Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	machine0, err := Machine()
	if err != nil {
		t.Fatal(err)
	}
	// spin until the process has used 200 ms more (however busy the machine is), in 10 ms
	// ticks
	var self1 time.Duration
	for deadline := time.Now().Add(20 * time.Second); self1-self0 < 200*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("Process reported %s used after 20 s of spinning", self1-self0)
		}
		for spin := time.Now(); time.Since(spin) < 10*time.Millisecond; {
		}
		if self1, err = Process(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	machine1, err := Machine()
	if err != nil {
		t.Fatal(err)
	}
	// the kernel samples the machine's busy time on its tick: allow a few ticks' error
	if busy := machine1 - machine0; busy < self1-self0-50*time.Millisecond {
		t.Errorf("the machine was busy %s while this process alone used %s", busy, self1-self0)
	}
	if _, err := Process(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

// Since sums by application_name, counts a backend that started in between from zero and
// leaves out one that ended.
func TestSinceSumsByApp(t *testing.T) {
	start := map[int]Backend{1: {"relay", time.Second}, 2: {"relay", 2 * time.Second}, 3: {"writer", time.Second}, 4: {"writer", time.Hour}}
	now := map[int]Backend{1: {"relay", 3 * time.Second}, 2: {"relay", 2 * time.Second}, 3: {"writer", 4 * time.Second}, 5: {"writer", time.Second}}
	got := Since(now, start)
	if len(got) != 2 || got["relay"] != 2*time.Second || got["writer"] != 4*time.Second {
		t.Errorf("Since = %v, want relay 2s, writer 4s", got)
	}
}
