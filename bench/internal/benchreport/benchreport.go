// Package benchreport holds what the benchmark programs share to report their
// figures: a description of the machine and server, the load average, the command
// line (DSN password redacted), medians, and the replacement of one section of a
// markdown results file.
package benchreport

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
)

// Machine describes where the figures come from.
type Machine struct {
	CPUs     int    // runtime.NumCPU
	Memory   string // MemTotal, e.g. "23.5 GiB"
	Version  string // the server's version()
	Settings string // the server settings that bias write benchmarks most
	TLS      bool   // the benchmark's connections are encrypted (pg_stat_ssl)
}

// DescribeMachine describes this machine and the server behind pool.
func DescribeMachine(ctx context.Context, pool *pgxpool.Pool) (Machine, error) {
	m := Machine{CPUs: runtime.NumCPU(), Memory: memTotal()}
	if err := pool.QueryRow(ctx, "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)").Scan(&m.TLS); err != nil {
		return Machine{}, fmt.Errorf("describe connection: %w", err)
	}
	if err := pool.QueryRow(ctx, "SELECT version()").Scan(&m.Version); err != nil {
		return Machine{}, fmt.Errorf("read server version: %w", err)
	}
	err := pool.QueryRow(ctx, `SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name)
		FROM pg_settings WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'autovacuum', 'max_wal_size')`).Scan(&m.Settings)
	if err != nil {
		return Machine{}, fmt.Errorf("read server settings: %w", err)
	}
	return m, nil
}

// LoadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg, or "unknown".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// Busy reports whether the 1-minute figure of a [LoadAvg] result exceeds cpus.
func Busy(load string, cpus int) bool {
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

// Preamble returns the list items every results section starts with: command, date,
// machine, server settings, load average at start and end, and, when the load average
// exceeded the CPU count, a warning ending with busyNote. program is the package path
// from bench/, e.g. "./cmd/writerbench".
func Preamble(program string, started time.Time, m Machine, loadStart, loadEnd, busyNote string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- Command (in `bench/`): `%s`\n", CommandLine(program))
	fmt.Fprintf(&b, "- Date: %s\n", started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Machine: nproc %d, memory %s, %s\n", m.CPUs, m.Memory, m.Version)
	fmt.Fprintf(&b, "- Server settings: %s\n", m.Settings)
	tls := "without TLS (`sslmode=disable` in the default DSN; runs before 2026-11-30 used TLS, which cost every configuration, the outbox's wider rows most)"
	if m.TLS {
		tls = "with TLS"
	}
	fmt.Fprintf(&b, "- Connections: loopback TCP %s\n", tls)
	fmt.Fprintf(&b, "- Load average (1/5/15 min) at start: %s; at end: %s\n", loadStart, loadEnd)
	if Busy(loadStart, m.CPUs) || Busy(loadEnd, m.CPUs) {
		fmt.Fprintf(&b, "- **Warning**: the 1-minute load average exceeded nproc: %s\n", busyNote)
	}
	return b.String()
}

// Median returns the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Met renders a target's outcome in bold.
func Met(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

// CommandLine reconstructs how the program was started, with any DSN password
// redacted: "go run <program> …" when run by go run, else the binary as called.
func CommandLine(program string) string {
	prog := os.Args[0]
	if strings.Contains(prog, string(filepath.Separator)+"go-build") {
		prog = "go run " + program
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

// WriteSection replaces (or appends) the section titled title in the markdown file at
// path with section, keeping the rest of the file, and writes it atomically.
func WriteSection(path, title, section string) error {
	old, err := os.ReadFile(path) //nolint:gosec // the -out file the user named
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	doc := ReplaceSection(string(old), title, section)
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

// ReplaceSection returns doc with its "## title" section (up to the next heading of
// level 1 or 2 outside a code fence) replaced by section, or with section appended when
// doc has no such section. An empty doc gets a title first.
func ReplaceSection(doc, title, section string) string {
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
