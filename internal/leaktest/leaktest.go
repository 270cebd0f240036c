// Package leaktest fails a test binary whose tests leave goroutines running: a relay
// not stopped, a pool not closed, a goroutine a test started and never waited for.
//
// Call it from TestMain, after the tests and the cleanups that end what is meant to
// outlive single tests:
//
//	func TestMain(m *testing.M) { leaktest.Main(m) }
//
// or, where TestMain has more to do, [Exit] or [Check] after m.Run. Goroutines of the
// runtime and of the test framework (by the function their go statement started) are
// not counted, nor those whose top function or own function (the one the go statement
// started) begins with a prefix the caller allows: long-lived goroutines that are meant
// to be alive when the tests end. Goroutines are compared by their top function: a
// listing of what leaked names each top function once, with how many goroutines stand
// there and one full stack.
package leaktest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// grace is how long [Check] waits for goroutines to end before it calls them leaked:
// goroutines that are ending (a pool's background loop told to stop, a timer's
// callback) need a moment after the cleanup that ended them.
var grace = 5 * time.Second

// framework are the prefixes of the own functions of the runtime's and the test
// framework's goroutines; signal.Notify's loop (started by the fuzzing coordinator,
// among others) lives as long as the process. (Not by top function: a leaked goroutine
// may stand in an exported runtime function, runtime.Gosched say.)
var framework = []string{"runtime.", "testing.", "os/signal."}

// stderr is where [Exit] reports leaks.
var stderr io.Writer = os.Stderr

// Main runs m's tests, then [Check] with the allowed prefixes, and exits: with m.Run's
// code, or 1 when the tests passed but goroutines leaked.
func Main(m *testing.M, allowed ...string) {
	os.Exit(Exit(m.Run(), allowed...))
}

// Exit returns the exit code for a test binary whose tests returned code: code, or 1
// when goroutines leaked (see [Check]), which it reports on standard error. Leaks are
// reported after failed tests too, but then do not change the code.
func Exit(code int, allowed ...string) int {
	if err := Check(allowed...); err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		if code == 0 {
			return 1
		}
	}
	return code
}

// Check waits up to five seconds for the goroutines other than the caller's, the runtime's,
// the test framework's and those allowed (by a prefix of their top or own function) to
// end, and returns an error listing those left, grouped by top function. It returns nil
// when none is left.
func Check(allowed ...string) error {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond) // nothing signals a goroutine's end: poll
	defer tick.Stop()
	for {
		left := leaked(allowed)
		if len(left) == 0 {
			return nil
		}
		select {
		case <-deadline.C:
			return report(left)
		case <-tick.C:
		}
	}
}

// goroutine is one goroutine of a stack dump.
type goroutine struct {
	top   string // the innermost function shown
	own   string // the function its go statement started (the outermost shown, but for wrappers)
	stack string // the goroutine's part of the dump
}

// leaked returns the goroutines, but for the caller's and the framework's, that no
// prefix in allowed covers.
func leaked(allowed []string) []goroutine {
	var left []goroutine
	for i, g := range goroutines() {
		if i == 0 { // runtime.Stack lists the caller's first
			continue
		}
		if !covered(g, allowed) {
			left = append(left, g)
		}
	}
	return left
}

func covered(g goroutine, allowed []string) bool {
	if g.own == "main.main" { // the test binary's main goroutine: m.Run, or TestMain
		return true
	}
	for _, p := range framework {
		if strings.HasPrefix(g.own, p) {
			return true
		}
	}
	for _, p := range allowed {
		if strings.HasPrefix(g.top, p) || strings.HasPrefix(g.own, p) {
			return true
		}
	}
	return false
}

// goroutines parses a dump of every goroutine, the caller's first.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for block := range bytes.SplitSeq(bytes.TrimSpace(buf), []byte("\n\n")) {
		out = append(out, parse(string(block)))
	}
	return out
}

// parse reads one goroutine's part of a dump:
//
//	goroutine 7 [chan receive]:
//	example.com/p.(*T).loop(0xc000010000)
//		/src/p/p.go:12 +0x1d
//	created by example.com/p.Start in goroutine 1
//		/src/p/p.go:5 +0x3a
func parse(block string) goroutine {
	g := goroutine{stack: block}
	lines := strings.Split(block, "\n")
	for _, line := range lines[1:] { // lines[0] is the goroutine's header
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by ") || strings.HasPrefix(line, "...") {
			continue
		}
		fn := line
		if i := strings.LastIndex(line, "("); i > 0 && strings.HasSuffix(line, ")") {
			fn = line[:i]
		}
		if g.top == "" {
			g.top = fn
		}
		if g.own == "" || !wrapper(fn) {
			g.own = fn
		}
	}
	return g
}

// wrappers are the standard library's functions that run another in a new goroutine:
// the goroutine's own function is the one they run.
var wrappers = []string{"sync.(*WaitGroup).Go.func", "time.goFunc", "context.AfterFunc.func"}

func wrapper(fn string) bool {
	for _, w := range wrappers {
		if strings.HasPrefix(fn, w) {
			return true
		}
	}
	return false
}

// report lists the goroutines left, one entry per top function, saying how many of
// them each own function started.
func report(left []goroutine) error {
	byTop := map[string][]goroutine{}
	for _, g := range left {
		byTop[g.top] = append(byTop[g.top], g)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "leaktest: %d goroutine(s) still running %s after the tests ended:", len(left), grace)
	for _, top := range slices.Sorted(maps.Keys(byTop)) {
		gs := byTop[top]
		owns := map[string]int{}
		for _, g := range gs {
			owns[g.own]++
		}
		var started []string
		for _, own := range slices.Sorted(maps.Keys(owns)) {
			started = append(started, fmt.Sprintf("%d by %s", owns[own], own))
		}
		fmt.Fprintf(&b, "\n\n%d × %s (started: %s); one of them:\n%s", len(gs), top, strings.Join(started, ", "), gs[0].stack)
	}
	return errors.New(b.String())
}
