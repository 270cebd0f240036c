package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/bench/internal/benchdb"
)

// sectionTitle is the level-2 heading of this program's section of the results file.
const sectionTitle = "Writer"

// Targets from the issue, and the minimal-table costs seen before on this machine.
const (
	targetOutboxVsMinimalPoints = 5.0 // outbox cost at most this many points above the minimal table's…
	targetClients               = 8   // …at this many clients
	targetBatchSpeedup          = 10.0
)

var referenceMinimalCost = map[int]float64{1: 12, 8: 18, 32: 26}

// report holds everything one run measured.
type report struct {
	started time.Time
	opts    options
	machine machine
	tps     [][][]float64   // [client count index][mode] per-run tx/s
	batch   [][]batchResult // [0: batch, 1: single] per run
	// 1, 5 and 15 minute load averages when the measurements started and ended:
	// other work on the machine biases the figures
	loadStart, loadEnd string
}

// machine describes where the figures come from.
type machine struct {
	cpus     int
	memory   string
	version  string
	settings string
}

func describeMachine(ctx context.Context, pool *pgxpool.Pool) (machine, error) {
	m := machine{cpus: runtime.NumCPU(), memory: memTotal()}
	if err := pool.QueryRow(ctx, "SELECT version()").Scan(&m.version); err != nil {
		return machine{}, fmt.Errorf("read server version: %w", err)
	}
	err := pool.QueryRow(ctx, `SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name)
		FROM pg_settings WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'autovacuum', 'max_wal_size')`).Scan(&m.settings)
	if err != nil {
		return machine{}, fmt.Errorf("read server settings: %w", err)
	}
	return m, nil
}

// loadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// busy reports whether the 1-minute figure of a loadAvg result exceeds cpus.
func busy(load string, cpus int) bool {
	f := strings.Fields(load)
	if len(f) == 0 {
		return false
	}
	l, err := strconv.ParseFloat(f[0], 64)
	return err == nil && l > float64(cpus)
}

// memTotal returns MemTotal from /proc/meminfo in GiB, or "unknown".
func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kib int64
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kib); err == nil {
			return fmt.Sprintf("%.1f GiB", float64(kib)/(1<<20))
		}
	}
	return "unknown"
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// cost is the throughput lost against base, in percent.
func cost(base, x float64) float64 { return (base - x) / base * 100 }

func metStr(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

// markdown renders the "Writer" section.
func (r report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("## %s\n\n", sectionTitle)
	p("What `outbox.Enqueue` costs a writer's throughput. Written by `bench/cmd/writerbench`; rerun to replace this section.\n\n")
	p("- Command (in `bench/`): `%s`\n", commandLine())
	p("- Date: %s\n", r.started.UTC().Format("2006-01-02 15:04 MST"))
	p("- Machine: nproc %d, memory %s, %s\n", r.machine.cpus, r.machine.memory, r.machine.version)
	p("- Server settings: %s\n", r.machine.settings)
	p("- Load average (1/5/15 min) at start: %s; at end: %s\n", r.loadStart, r.loadEnd)
	if busy(r.loadStart, r.machine.cpus) || busy(r.loadEnd, r.machine.cpus) {
		p("- **Warning**: the 1-minute load average exceeded nproc: other work shared the machine and biased some runs (see \"Every run\").\n")
	}
	p("- Go: %s %s/%s; %d interleaved runs of %s per configuration, medians reported\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, r.opts.runs, r.opts.duration)

	p("### Throughput\n\n")
	p("Each transaction: `UPDATE accounts SET balance = balance + 1 WHERE id = $1` (random id of %d) then commit, through a pgxpool; ", benchdb.Accounts)
	p("\"+ minimal insert\" adds one INSERT into a 5-column table (bigserial primary key, no other index); ")
	p("\"+ outbox.Enqueue\" adds one `outbox.Enqueue` of one event (aggregate account/id, %d-byte JSON payload) via `outbox.PgxTx(tx)`. ", len(benchdb.Payload))
	p("Cost = (business only − x) / business only. Before every measurement both event tables are truncated, `accounts` vacuumed and a checkpoint taken.\n\n")
	p("| clients | business only (tx/s) | + minimal insert (tx/s) | minimal cost | + outbox.Enqueue (tx/s) | outbox cost | outbox − minimal |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|\n")
	costs := make(map[int][2]float64)
	for ci, clients := range clientCounts {
		base := median(r.tps[ci][modeBase])
		minimal := median(r.tps[ci][modeMinimal])
		ob := median(r.tps[ci][modeOutbox])
		cm, co := cost(base, minimal), cost(base, ob)
		costs[clients] = [2]float64{cm, co}
		p("| %d | %.0f | %.0f | %.1f%% | %.0f | %.1f%% | %+.1f pts |\n", clients, base, minimal, cm, ob, co, co-cm)
	}

	batchEnq := make([]float64, 2)
	batchTx := make([]float64, 2)
	for i, runs := range r.batch {
		var enq, tx []float64
		for _, res := range runs {
			enq = append(enq, micros(res.enqueuePerEvent()))
			tx = append(tx, micros(res.txPerEvent()))
		}
		batchEnq[i], batchTx[i] = median(enq), median(tx)
	}
	ratioEnq, ratioTx := batchEnq[1]/batchEnq[0], batchTx[1]/batchTx[0]

	p("\n### Batch vs single Enqueue calls\n\n")
	p("One client, one transaction of %d events for %d distinct accounts: one `Enqueue` call with all of them (batch%d) or %d calls of one event (single%d). ",
		batchSize, batchSize, batchSize, batchSize, batchSize)
	p("\"In Enqueue\" is the time spent in the Enqueue calls; \"whole transaction\" adds begin and commit.\n\n")
	p("| mode | µs/event in Enqueue | µs/event, whole transaction |\n|---|---:|---:|\n")
	for i, single := range []bool{false, true} {
		p("| %s | %.2f | %.2f |\n", batchName(single), batchEnq[i], batchTx[i])
	}
	p("| single/batch ratio | %.1f× | %.1f× |\n", ratioEnq, ratioTx)

	c := costs[targetClients]
	diff := c[1] - c[0]
	p("\n### Targets (this run)\n\n")
	p("- Outbox within %.0f points of the minimal table at %d clients: %s — outbox %.1f%%, minimal %.1f%%, difference %+.1f points.\n",
		targetOutboxVsMinimalPoints, targetClients, metStr(diff <= targetOutboxVsMinimalPoints), c[1], c[0], diff)
	p("- %d-event batch ≥ %.0f× faster per event than single calls: %s — %.1f× in Enqueue (%.1f× per whole transaction).\n",
		batchSize, targetBatchSpeedup, metStr(ratioEnq >= targetBatchSpeedup), ratioEnq, ratioTx)
	p("- Reference only: minimal-table cost seen before on this machine ")
	var ref, now []string
	for _, clients := range clientCounts {
		ref = append(ref, fmt.Sprintf("%.0f%%", referenceMinimalCost[clients]))
		now = append(now, fmt.Sprintf("%.1f%%", costs[clients][0]))
	}
	p("%s at %s clients; this run %s.\n", strings.Join(ref, "/"), joinInts(clientCounts, "/"), strings.Join(now, "/"))

	p("\n### Every run (tx/s)\n\n| clients | configuration | runs |\n|---:|---|---|\n")
	for ci, clients := range clientCounts {
		for _, m := range modes {
			var runs []string
			for _, x := range r.tps[ci][m] {
				runs = append(runs, fmt.Sprintf("%.0f", x))
			}
			p("| %d | %s | %s |\n", clients, m, strings.Join(runs, ", "))
		}
	}
	for i, single := range []bool{false, true} {
		var runs []string
		for _, res := range r.batch[i] {
			runs = append(runs, fmt.Sprintf("%.2f", micros(res.enqueuePerEvent())))
		}
		p("| 1 | %s, µs/event in Enqueue | %s |\n", batchName(single), strings.Join(runs, ", "))
	}
	return b.String()
}

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}

// commandLine reconstructs how the program was started, with any DSN password
// redacted: "go run ./cmd/writerbench …" when run by go run, else the binary as called.
func commandLine() string {
	prog := os.Args[0]
	if strings.Contains(prog, string(filepath.Separator)+"go-build") {
		prog = "go run ./cmd/writerbench"
	}
	parts := []string{prog}
	redactNext := false
	for _, a := range os.Args[1:] {
		switch {
		case redactNext:
			a, redactNext = redactDSN(a), false
		case a == "-dsn" || a == "--dsn":
			redactNext = true
		case strings.HasPrefix(a, "-dsn=") || strings.HasPrefix(a, "--dsn="):
			name, v, _ := strings.Cut(a, "=")
			a = name + "=" + redactDSN(v)
		}
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		if strings.Contains(dsn, "password") {
			return "<dsn redacted>"
		}
		return dsn
	}
	return u.Redacted()
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:@,+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeSection replaces (or appends) the section titled title in the markdown file at
// path with section, keeping the rest of the file, and writes it atomically.
func writeSection(path, title, section string) error {
	old, err := os.ReadFile(path) //nolint:gosec // the -out file the user named
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	doc := replaceSection(string(old), title, section)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".results-*.md")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.WriteString(doc); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { //nolint:gosec // a results file meant to be read
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// replaceSection returns doc with its "## title" section (up to the next heading of
// level 1 or 2 outside a code fence) replaced by section, or with section appended when
// doc has no such section. An empty doc gets a title first.
func replaceSection(doc, title, section string) string {
	section = strings.TrimRight(section, "\n") + "\n"
	if strings.TrimSpace(doc) == "" {
		return "# Benchmark results\n\nFigures from the programs in `bench/`; each replaces its own section when rerun.\n\n" + section
	}
	lines := strings.SplitAfter(doc, "\n")
	start, end := -1, len(lines)
	fenced := false
	for i, line := range lines {
		t := strings.TrimRight(line, " \t\r\n")
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		heading := t == "#" || t == "##" || strings.HasPrefix(t, "# ") || strings.HasPrefix(t, "## ")
		switch {
		case start < 0 && t == "## "+title:
			start = i
		case start >= 0 && heading:
			end = i
		}
		if end < len(lines) {
			break
		}
	}
	if start < 0 {
		return strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	var b bytes.Buffer
	b.WriteString(strings.Join(lines[:start], ""))
	b.WriteString(section)
	if end < len(lines) {
		b.WriteString("\n")
		b.WriteString(strings.Join(lines[end:], ""))
	}
	return b.String()
}
