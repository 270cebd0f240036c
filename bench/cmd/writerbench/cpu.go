package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on every
// architecture Go supports there).
const clockTicks = 100

// cpuSample is the CPU time used so far by this process and by each backend of the
// benchmark's database.
type cpuSample struct {
	self     time.Duration
	backends map[int]time.Duration
}

// sampleCPU reads this process's CPU time (getrusage) and that of every backend of the
// current database (/proc/<pid>/stat: the server runs on this machine). A figure that
// does not depend on how many other processes share the CPUs, as throughput does.
func sampleCPU(ctx context.Context, pool *pgxpool.Pool) (cpuSample, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSample{}, fmt.Errorf("getrusage: %w", err)
	}
	s := cpuSample{
		self:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		backends: map[int]time.Duration{},
	}
	rows, err := pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
	if err != nil {
		return cpuSample{}, fmt.Errorf("list backends: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return cpuSample{}, fmt.Errorf("list backends: %w", err)
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return cpuSample{}, fmt.Errorf("read CPU time of backend %d (is the server on this machine?): %w", pid, err)
		}
		// Fields after the command name, which is in parentheses and may hold spaces:
		// utime and stime are the 12th and 13th of them.
		_, rest, _ := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if len(f) < 13 {
			return cpuSample{}, fmt.Errorf("backend %d: short /proc stat line", pid)
		}
		ut, err1 := strconv.ParseInt(f[11], 10, 64)
		st, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return cpuSample{}, fmt.Errorf("backend %d: /proc stat times %q %q", pid, f[11], f[12])
		}
		s.backends[pid] = time.Duration(ut+st) * time.Second / clockTicks
	}
	return s, rows.Err()
}

// since returns the CPU time used between start and s; a backend that started in
// between counts from zero.
func (s cpuSample) since(start cpuSample) time.Duration {
	d := s.self - start.self
	for pid, t := range s.backends {
		d += t - start.backends[pid]
	}
	return d
}
