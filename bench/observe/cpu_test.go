package observe_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) used so far by this process, which runs every
// arm's relay, and by the PostgreSQL cluster pgtest started as its child (zero when the
// tests use a server of TEST_DATABASE_URL's).
type cpuTime struct{ relay, db time.Duration }

func (c cpuTime) sub(o cpuTime) cpuTime { return cpuTime{c.relay - o.relay, c.db - o.db} }

// cpuClock reads cpuTime. The relay's comes from getrusage (microseconds); the
// cluster's from /proc: the run time of the postmaster and its live children (backends,
// autovacuum, the WAL writer; schedstat, nanoseconds) and the CPU ticks of its reaped
// children (a process that exits between two readings moves from the one to the other).
type cpuClock struct {
	postmaster int // 0: no cluster of ours
	tick       time.Duration
}

// newCPUClock finds the postmaster among this process's children.
func newCPUClock() *cpuClock {
	c := &cpuClock{tick: time.Second / 100} // USER_HZ: 100 on every Linux port
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		comm, fields, ok := readStat(path)
		if ok && comm == "postgres" && fields[1] == self {
			c.postmaster, _ = strconv.Atoi(filepath.Base(filepath.Dir(path)))
			break
		}
	}
	return c
}

// hasDB reports whether the clock reads the database's CPU time.
func (c *cpuClock) hasDB() bool { return c.postmaster != 0 }

func (c *cpuClock) now() cpuTime {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	t := cpuTime{relay: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	if c.postmaster == 0 {
		return t
	}
	pm := strconv.Itoa(c.postmaster)
	// The live processes' run time in nanoseconds (schedstat; every PostgreSQL process
	// has one thread), the reaped ones' in ticks (only the postmaster's cutime and
	// cstime have them).
	t.db = runTime(pm) + time.Duration(reapedTicks(pm))*c.tick
	kids, _ := os.ReadFile(filepath.Join("/proc", pm, "task", pm, "children"))
	for _, kid := range strings.Fields(string(kids)) {
		t.db += runTime(kid)
	}
	return t
}

// runTime returns the time process pid's main thread has run on a CPU.
func runTime(pid string) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "schedstat"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	ns, _ := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns)
}

// reapedTicks returns the CPU ticks of process pid's reaped children.
func reapedTicks(pid string) int64 {
	_, fields, ok := readStat(filepath.Join("/proc", pid, "stat"))
	if !ok {
		return 0
	}
	// fields[0] is stat's field 3 (state): cutime is field 16, cstime 17.
	var n int64
	for _, f := range fields[13:15] {
		v, _ := strconv.ParseInt(f, 10, 64)
		n += v
	}
	return n
}

// readStat reads /proc/<pid>/stat: the command's name and the fields after it.
func readStat(path string) (comm string, fields []string, ok bool) {
	b, err := os.ReadFile(path) //nolint:gosec // a /proc path
	if err != nil {
		return "", nil, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", nil, false
	}
	fields = strings.Fields(s[end+1:])
	if len(fields) < 15 {
		return "", nil, false
	}
	return s[open+1 : end], fields, true
}
