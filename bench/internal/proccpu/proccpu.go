// Package proccpu reads the CPU time of processes of this machine from /proc: the
// benchmark programs' own, their relay children's and their database server's backends
// (the server must run on this machine). CPU time does not depend on how many other
// processes share the CPUs, as throughput and latency do, so it is the steadier figure on
// a loaded machine.
package proccpu

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is Linux's USER_HZ, the unit of /proc's CPU times (100 on every
// architecture Go supports there).
const clockTicks = 100

// Process returns the CPU time (user and system) process pid has used so far.
func Process(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces: utime
	// and stime are the 12th and 13th of them.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("process %d: short /proc stat line", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("process %d: /proc stat times %q %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// Backend is one server backend's CPU time so far.
type Backend struct {
	App string // its application_name
	CPU time.Duration
}

// Backends returns the CPU time used so far by every backend of the database pool is
// connected to, by process id.
func Backends(ctx context.Context, pool *pgxpool.Pool) (map[int]Backend, error) {
	rows, err := pool.Query(ctx, "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database()")
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	defer rows.Close()
	backends := map[int]Backend{}
	for rows.Next() {
		var (
			pid int
			app string
		)
		if err := rows.Scan(&pid, &app); err != nil {
			return nil, fmt.Errorf("list backends: %w", err)
		}
		cpu, err := Process(pid)
		if err != nil {
			if os.IsNotExist(err) {
				continue // it ended since the list was read
			}
			return nil, fmt.Errorf("backend (is the server on this machine?): %w", err)
		}
		backends[pid] = Backend{App: app, CPU: cpu}
	}
	return backends, rows.Err()
}

// Since returns the CPU time each backend of now used since start, summed by
// application_name. A backend that started in between counts from zero; one that ended
// is not counted.
func Since(now, start map[int]Backend) map[string]time.Duration {
	byApp := map[string]time.Duration{}
	for pid, b := range now {
		byApp[b.App] += b.CPU - start[pid].CPU
	}
	return byApp
}

// Machine returns the time the machine's CPUs have spent busy (user, nice, system, irq,
// softirq and steal time: neither idle nor waiting for I/O), summed over the CPUs, from
// /proc/stat.
func Machine() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:min(len(f), 9)] { // guest times are in user and nice already
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %w", v, err)
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}
