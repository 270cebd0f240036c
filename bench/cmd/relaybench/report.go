package main

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/outboxkit/outbox/bench/internal/benchreport"
)

// busyNote ends the preamble's warning about a high load average.
const busyNote = "the benchmark's own processes (relay children, producer, server backends) count in it, " +
	"but other work may also have shared the machine and biased some runs (compare \"Every limit trial\" and the writer runs)."

// sectionTitle is the level-2 heading of this program's section of the results file.
const sectionTitle = "Relay"

// report holds everything one run measured.
type report struct {
	started            time.Time
	opts               options
	machine            benchreport.Machine
	loadStart, loadEnd string
	parts              []partReport
	code               string // the commit measured, see codeVersion
}

// codeVersion names the commit the library was built from, and whether its Go or SQL
// files outside bench/ differed from it: "abc1234" or "abc1234 + uncommitted changes…".
func codeVersion(ctx context.Context) string {
	rev, err := exec.CommandContext(ctx, "git", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown (no git)"
	}
	v := strings.TrimSpace(string(rev))
	dirty, err := exec.CommandContext(ctx, "git", "-C", "..", "status", "--porcelain", "--", "*.go", "*.sql", "go.mod", ":!bench").Output()
	if err == nil && len(strings.TrimSpace(string(dirty))) > 0 {
		v += " + uncommitted Go/SQL changes outside bench/"
	}
	return v
}

// markdown renders the "Relay" section: the preamble, every target, then each part.
func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", sectionTitle)
	b.WriteString("How fast the relay drains, scales out and wakes up, what its wake-ups cost writers, and its claim plans. ")
	b.WriteString("Written by `bench/cmd/relaybench`; rerun to replace this section (it holds only the parts of the last run). ")
	b.WriteString("Ratios compare figures measured in the same run.\n\n")
	b.WriteString(benchreport.Preamble("./cmd/relaybench", r.started, r.machine, r.loadStart, r.loadEnd, busyNote))
	fmt.Fprintf(&b, "- Go: %s %s/%s; code: %s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, r.code)
	b.WriteString("- Server note: autovacuum is off on this server, so nothing is vacuumed or analyzed unless a part says so.\n\n")
	b.WriteString("### Targets (this run)\n\n")
	for _, p := range r.parts {
		for _, t := range p.targets {
			fmt.Fprintf(&b, "- %s\n", t)
		}
	}
	for _, p := range r.parts {
		b.WriteString("\n")
		b.WriteString(p.md)
	}
	return b.String()
}
