package cli

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

// errNoPostgres is the demo's message when it must start PostgreSQL and cannot.
var errNoPostgres = errors.New("no PostgreSQL server binaries (initdb, postgres) on PATH or in /usr/lib/postgresql/*/bin: " +
	"install the PostgreSQL server package (Debian/Ubuntu: apt install postgresql; Fedora: dnf install postgresql-server; macOS: brew install postgresql@16), " +
	"or give a database with --database-url or DATABASE_URL")

// demoPostgres is a throwaway PostgreSQL cluster the demo starts from the server
// binaries: its own temporary directory, 127.0.0.1 and a free port, trust auth. When
// running as root, initdb and postgres run as the postgres user (they refuse root).
type demoPostgres struct {
	dir    string
	port   int
	server *exec.Cmd
	exited chan struct{}
}

// postgresBinGlob is where the distributions' packages put the server binaries, one
// directory per major version (a variable for the test of the missing binaries).
var postgresBinGlob = "/usr/lib/postgresql/*/bin"

// postgresBinDir finds the directory holding initdb and postgres.
func postgresBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "postgres")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob(postgresBinGlob)
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errNoPostgres
}

func pgMajor(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// startDemoPostgres initialises and starts a cluster and waits until it accepts
// connections. Stop it with stop, which also removes its directory.
func startDemoPostgres(ctx context.Context) (*demoPostgres, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-demo-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres: make the cluster directory: %w", err)
	}
	p := &demoPostgres{dir: dir}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres: running as root needs a postgres system user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres: chown the cluster directory: %w", err)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)} //nolint:gosec // ids from /etc/passwd
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C") //nolint:gosec // our own binary dir
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: initdb: %w\n%s", err, out)
	}
	if p.port, err = freeTCPPort(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	settings := strings.Join([]string{
		"listen_addresses = '127.0.0.1'", fmt.Sprintf("port = %d", p.port),
		fmt.Sprintf("unix_socket_directories = '%s'", dir),
		"fsync = off", "synchronous_commit = off", "full_page_writes = off", "max_connections = 100",
	}, "\n")
	if err := appendFile(filepath.Join(data, "postgresql.conf"), "\n"+settings+"\n"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log")) //nolint:gosec // our own temp dir
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: create the server log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	if cred != nil {
		_ = os.Chown(logFile.Name(), int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data) //nolint:gosec,noctx // lives as long as the demo
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The server dies with the demo however it ends (Pdeathsig, from a thread that
	// lives as long as the process).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := startOnOneThread(cmd); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: start the server: %w", err)
	}
	p.server, p.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, p.url())
		if err == nil {
			_ = conn.Close(ctx)
			return p, nil
		}
		select {
		case <-p.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log")) //nolint:gosec // our own temp dir
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres: the server exited at start:\n%s", log)
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, errors.New("postgres: the server did not accept connections within 60s")
		}
	}
}

// url is the cluster's connection string (database postgres).
func (p *demoPostgres) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// stop stops the server (fast shutdown, SIGKILL after 10 s) and removes the directory.
func (p *demoPostgres) stop() {
	if p.server != nil {
		_ = p.server.Process.Signal(syscall.SIGINT)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.server.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	_ = os.RemoveAll(p.dir)
}

func appendFile(name, text string) error {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0) //nolint:gosec // our own temp dir
	if err != nil {
		return fmt.Errorf("postgres: open %s: %w", name, err)
	}
	_, werr := f.WriteString(text)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("postgres: write %s: %w", name, err)
	}
	return nil
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0") //nolint:noctx // a moment's listener to pick a port
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil //nolint:forcetypeassert // a TCP listener
}

// startOnOneThread starts cmd from one OS thread that lives as long as the process:
// PR_SET_PDEATHSIG fires when the forking *thread* ends, and Go may end threads.
func startOnOneThread(cmd *exec.Cmd) error {
	starterOnce.Do(func() {
		starter = make(chan startReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for req := range starter {
				req.done <- req.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	starter <- startReq{cmd, done}
	return <-done
}

type startReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	starterOnce sync.Once
	starter     chan startReq
)
