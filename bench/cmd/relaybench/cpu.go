package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/bench/internal/proccpu"
)

// relayApp is the application_name of a relay child's connections: it tells their
// backends' CPU time from the producers'.
const relayApp = "relaybench relay"

// cpuMark is the CPU time used so far, by role, at one moment of a run.
type cpuMark struct {
	at          time.Time
	machine     time.Duration // every CPU of the machine, busy
	child, self time.Duration // the relay child's process, this one's
	backends    map[int]proccpu.Backend
	cpus        int
}

// markCPU reads the CPU time used so far by the machine, the relay child childPID, this
// process and every backend of pool's database (the server runs on this machine).
func markCPU(ctx context.Context, pool *pgxpool.Pool, childPID int) (cpuMark, error) {
	m := cpuMark{at: time.Now(), cpus: runtime.NumCPU()}
	var err error
	if m.machine, err = proccpu.Machine(); err != nil {
		return cpuMark{}, err
	}
	if m.child, err = proccpu.Process(childPID); err != nil {
		return cpuMark{}, fmt.Errorf("relay child: %w", err)
	}
	if m.self, err = proccpu.Process(os.Getpid()); err != nil {
		return cpuMark{}, err
	}
	if m.backends, err = proccpu.Backends(ctx, pool); err != nil {
		return cpuMark{}, err
	}
	return m, nil
}

// cpuShares is how busy each role kept the machine over a window of a run, in percent
// of all its CPUs.
type cpuShares struct {
	machine, relayBackends, relayProcess, otherBackends, bench float64
}

// until returns the shares of the machine each role used from m to end.
func (m cpuMark) until(end cpuMark) cpuShares {
	whole := float64(end.at.Sub(m.at)) * float64(m.cpus) / 100
	var relay, other time.Duration
	for app, d := range proccpu.Since(end.backends, m.backends) {
		if app == relayApp {
			relay += d
		} else {
			other += d
		}
	}
	return cpuShares{
		machine:       float64(end.machine-m.machine) / whole,
		relayBackends: float64(relay) / whole,
		relayProcess:  float64(end.child-m.child) / whole,
		otherBackends: float64(other) / whole,
		bench:         float64(end.self-m.self) / whole,
	}
}

// String is the shares as the isolation part's table cell shows them.
func (s cpuShares) String() string {
	return fmt.Sprintf("%.0f / %.0f / %.0f / %.0f (%.0f)", s.relayBackends, s.relayProcess, s.otherBackends, s.bench, s.machine)
}
