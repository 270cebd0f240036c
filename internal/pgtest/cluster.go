package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a throwaway PostgreSQL cluster started from the server binaries, for tests
// that need their own server (to stop or kill it, or for wal_level=logical). It listens
// on a unix socket in its directory and on 127.0.0.1:Port.
type Cluster struct {
	// Dir holds the data directory and the socket.
	Dir string
	// Port is the TCP port on 127.0.0.1 (and the socket's number).
	Port int

	bin    string
	asUser string // "postgres" when running as root, else ""
	cred   *syscall.Credential

	server *exec.Cmd     // the running postmaster, a child of this process
	exited chan struct{} // closed when server has exited
}

// ownerFile, in a cluster's directory, holds the pid of the process that started the
// cluster: a cluster whose owner is gone is a leftover (its test binary was killed or
// timed out), and the next StartCluster stops it and removes it.
const ownerFile = "owner.pid"

// ErrNoServerBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoServerBinaries = errors.New("pgtest: no PostgreSQL server binaries (initdb, pg_ctl) found on PATH or in /usr/lib/postgresql/*/bin: install postgresql, or set TEST_DATABASE_URL to a server the tests may create databases on")

// findBin returns the directory holding initdb and pg_ctl.
func findBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			// the directory of the real binaries, where pg_basebackup is too (a PATH
			// entry may hold links to a few of them)
			if real, err := filepath.EvalSymlinks(p); err == nil {
				p = real
			}
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoServerBinaries
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// StartCluster initialises and starts a new cluster with settings for fast tests
// (fsync off) and logical replication (wal_level=logical). Stop it with [Cluster.Destroy].
//
// The server is a child of this process and dies with it: however the test binary ends
// (a timeout, a kill), its cluster does not outlive it holding ports and files. Clusters
// left behind by earlier test processes that ended are stopped and removed first.
func StartCluster(extraSettings ...string) (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	removeLeftovers()
	c, err := newCluster(bin)
	if err != nil {
		return nil, err
	}
	dir, port := c.Dir, c.Port
	if out, err := c.run("initdb", "-D", c.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	settings := []string{
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", port),
		fmt.Sprintf("unix_socket_directories = '%s'", dir),
		"fsync = off",
		"full_page_writes = off",
		"synchronous_commit = off",
		"wal_level = logical",
		"max_wal_senders = 10",
		"max_replication_slots = 10",
		"max_connections = 300",
		"shared_buffers = 64MB",
		"log_min_messages = warning",
	}
	settings = append(settings, extraSettings...)
	if err := appendSettings(c.dataDir(), settings...); err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// newCluster makes the directory of a cluster (owned by the postgres user when running
// as root) and picks its port; nothing is in it yet.
func newCluster(bin string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "outbox-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: make cluster dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil { //nolint:gosec // a pid, read by other test processes
		return nil, fmt.Errorf("pgtest: record the cluster's owner: %w", err)
	}
	c := &Cluster{Dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root: run them as the postgres user,
		// who needs to own the directory.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root needs a postgres system user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("pgtest: chown cluster dir: %w", err)
		}
		c.asUser = "postgres"
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)} //nolint:gosec // ids from /etc/passwd
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c.Port = port
	return c, nil
}

// StartReplica starts a streaming physical replica of c: a base backup taken over TCP
// (pg_basebackup -R, no replication slot), with c's settings but a port and socket of its
// own, following c until [Cluster.Promote].
func (c *Cluster) StartReplica() (*Cluster, error) {
	r, err := newCluster(c.bin)
	if err != nil {
		return nil, err
	}
	if out, err := r.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres",
		"-D", r.dataDir(), "-R", "-X", "stream", "--no-sync"); err != nil {
		_ = os.RemoveAll(r.Dir)
		return nil, fmt.Errorf("pgtest: pg_basebackup: %w\n%s", err, out)
	}
	// the copy's postgresql.conf has c's port and socket: later lines win
	if err := appendSettings(r.dataDir(), fmt.Sprintf("port = %d", r.Port), fmt.Sprintf("unix_socket_directories = '%s'", r.Dir)); err != nil {
		return nil, err
	}
	if err := r.Start(); err != nil {
		_ = os.RemoveAll(r.Dir)
		return nil, err
	}
	return r, nil
}

// Promote makes a replica a primary (pg_ctl promote) and returns once it accepts writes.
func (c *Cluster) Promote() error {
	if out, err := c.run("pg_ctl", "promote", "-w", "-D", c.dataDir()); err != nil {
		return fmt.Errorf("pgtest: promote: %w\n%s", err, out)
	}
	return nil
}

// appendSettings appends lines to the postgresql.conf of the data directory dataDir.
func appendSettings(dataDir string, lines ...string) error {
	f, err := os.OpenFile(filepath.Join(dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0) //nolint:gosec // our own temp dir
	if err != nil {
		return fmt.Errorf("pgtest: open postgresql.conf: %w", err)
	}
	_, werr := f.WriteString("\n" + strings.Join(lines, "\n") + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("pgtest: write postgresql.conf: %w", err)
	}
	return nil
}

func (c *Cluster) dataDir() string { return filepath.Join(c.Dir, "data") }

func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	cmdPath := filepath.Join(c.bin, name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if c.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.asUser, "--", cmdPath}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, cmdPath, args...)
	}
	cmd.Dir = c.Dir
	return cmd.CombinedOutput()
}

// Start starts the cluster (again, after [Cluster.Stop]) and waits until it accepts
// connections. The postmaster runs as a child of this process that the kernel kills
// when this process ends (PR_SET_PDEATHSIG); its backends then exit on their own.
func (c *Cluster) Start() error {
	logFile, err := os.OpenFile(filepath.Join(c.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644) //nolint:gosec // our own temp dir
	if err != nil {
		return fmt.Errorf("pgtest: open server log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.dataDir()) //nolint:noctx // lives as long as the cluster
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := startOnLockedThread(cmd); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	c.server, c.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.Ping(context.Background()); err == nil {
			return nil
		}
		select {
		case <-c.exited:
			log, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
			return fmt.Errorf("pgtest: postgres exited at start (%v):\n%s", cmd.ProcessState, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = c.Stop("immediate")
			return errors.New("pgtest: postgres did not accept connections within 60s")
		}
	}
}

// Stop stops the cluster; mode is "smart" or "fast" (graceful) or "immediate" (like a
// crash), as pg_ctl's modes.
func (c *Cluster) Stop(mode string) error {
	if c.server == nil {
		return nil
	}
	sig := map[string]syscall.Signal{"smart": syscall.SIGTERM, "fast": syscall.SIGINT, "immediate": syscall.SIGQUIT}[mode]
	if sig == 0 {
		return fmt.Errorf("pgtest: unknown stop mode %q", mode)
	}
	_ = c.server.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-c.server.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
	c.server = nil
	return nil
}

// Destroy stops the cluster and removes its directory.
func (c *Cluster) Destroy() error {
	err := c.Stop("immediate")
	return errors.Join(err, os.RemoveAll(c.Dir))
}

// startOnLockedThread starts cmd from one OS thread that lives as long as the process:
// the kernel sends PR_SET_PDEATHSIG when the *thread* that forked the child ends, and Go
// may end threads, so a child started from any thread could be killed early.
func startOnLockedThread(cmd *exec.Cmd) error {
	starterOnce.Do(func() {
		starter = make(chan startRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for req := range starter {
				req.done <- req.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	starter <- startRequest{cmd, done}
	return <-done
}

type startRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	starterOnce sync.Once
	starter     chan startRequest
)

// removeLeftovers stops and removes the clusters of test processes that are gone.
func removeLeftovers() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "outbox-pgtest-*"))
	for _, dir := range dirs {
		owner, err := readPID(filepath.Join(dir, ownerFile))
		switch {
		case err == nil && alive(owner):
			continue // in use
		case err != nil:
			// No owner recorded: being set up right now, or left by a version of this
			// package that recorded none; the latter once it is a minute old.
			if info, serr := os.Stat(dir); serr != nil || time.Since(info.ModTime()) < time.Minute {
				continue
			}
		}
		if pm, err := readPID(filepath.Join(dir, "data", "postmaster.pid")); err == nil && alive(pm) {
			_ = syscall.Kill(pm, syscall.SIGKILL) // its backends exit when their postmaster dies
		}
		_ = os.RemoveAll(dir)
	}
}

// readPID reads the number on the first line of a pid file.
func readPID(path string) (int, error) {
	b, err := os.ReadFile(path) //nolint:gosec // our own temp dirs
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	return pid > 0 && (syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM))
}

// ConnString returns a connection string for database db over the unix socket.
func (c *Cluster) ConnString(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", c.Dir, c.Port, db)
}

// TCPConnString returns a connection string for database db over 127.0.0.1.
func (c *Cluster) TCPConnString(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Ping checks the cluster accepts connections.
func (c *Cluster) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func freePort() (int, error) {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
