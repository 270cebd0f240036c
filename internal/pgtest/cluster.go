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
	"sort"
	"strconv"
	"strings"
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
}

// ErrNoServerBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoServerBinaries = errors.New("pgtest: no PostgreSQL server binaries (initdb, pg_ctl) found on PATH or in /usr/lib/postgresql/*/bin: install postgresql, or set TEST_DATABASE_URL to a server the tests may create databases on")

// findBin returns the directory holding initdb and pg_ctl.
func findBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
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
func StartCluster(extraSettings ...string) (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: make cluster dir: %w", err)
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
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c.Port = port
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
	conf := filepath.Join(c.dataDir(), "postgresql.conf")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0) //nolint:gosec // our own temp dir
	if err != nil {
		return nil, fmt.Errorf("pgtest: open postgresql.conf: %w", err)
	}
	_, werr := f.WriteString("\n" + strings.Join(settings, "\n") + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return nil, fmt.Errorf("pgtest: write postgresql.conf: %w", err)
	}
	if err := c.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
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

// Start starts the cluster (again, after [Cluster.Stop]) and waits until it accepts connections.
func (c *Cluster) Start() error {
	if out, err := c.run("pg_ctl", "-D", c.dataDir(), "-l", filepath.Join(c.Dir, "server.log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
		return fmt.Errorf("pgtest: start cluster: %w\n%s\n%s", err, out, log)
	}
	return nil
}

// Stop stops the cluster; mode is "fast" (graceful) or "immediate" (like a crash).
func (c *Cluster) Stop(mode string) error {
	if out, err := c.run("pg_ctl", "-D", c.dataDir(), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("pgtest: stop cluster: %w\n%s", err, out)
	}
	return nil
}

// Destroy stops the cluster and removes its directory.
func (c *Cluster) Destroy() error {
	err := c.Stop("immediate")
	return errors.Join(err, os.RemoveAll(c.Dir))
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
