package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/bench/internal/proccpu"
)

// cpuSample is the CPU time used so far by this process and by each backend of the
// benchmark's database.
type cpuSample struct {
	self     time.Duration
	backends map[int]proccpu.Backend
}

// sampleCPU reads this process's CPU time (getrusage) and that of every backend of the
// current database (proccpu.Backends: the server runs on this machine). A figure that
// does not depend on how many other processes share the CPUs, as throughput does.
func sampleCPU(ctx context.Context, pool *pgxpool.Pool) (cpuSample, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSample{}, fmt.Errorf("getrusage: %w", err)
	}
	backends, err := proccpu.Backends(ctx, pool)
	if err != nil {
		return cpuSample{}, err
	}
	return cpuSample{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), backends: backends}, nil
}

// since returns the CPU time used between start and s; a backend that started in
// between counts from zero.
func (s cpuSample) since(start cpuSample) time.Duration {
	d := s.self - start.self
	for _, t := range proccpu.Since(s.backends, start.backends) {
		d += t
	}
	return d
}
