package pgtest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const childEnv = "PGTEST_CLUSTER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A test process that starts a cluster, says where, and waits to be killed.
		c, err := StartCluster()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		os.Stdout.WriteString("CLUSTER " + c.Dir + "\n")
		select {}
	}
	Main(m)
}

// A cluster ends with the test process that started it: when the test binary is killed
// (a timeout, kill -9), its postmaster is killed too and its backends exit, and the next
// StartCluster removes the directory it left.
func TestClusterEndsWithItsTestProcess(t *testing.T) {
	if _, err := findBin(); err != nil {
		t.Fatal(err) // the tests need the server binaries; CI installs them
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "CLUSTER ") {
		_ = cmd.Process.Kill()
		t.Fatalf("child said %q, %v", line, err)
	}
	dir := strings.TrimSpace(strings.TrimPrefix(line, "CLUSTER "))
	postmaster, err := readPID(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil || !alive(postmaster) {
		t.Fatalf("the child's postmaster (%d, %v) is not running", postmaster, err)
	}
	backends := childrenOf(t, postmaster)

	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(postmaster) || anyAlive(backends) {
		if time.Now().After(deadline) {
			t.Fatalf("10s after its test process was killed, postmaster %d (alive %v) or its processes %v still run", postmaster, alive(postmaster), backends)
		}
		time.Sleep(20 * time.Millisecond)
	}

	c, err := StartCluster()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Destroy() }()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the killed process's cluster directory %s is still there (%v)", dir, err)
	}
}

// childrenOf returns the pids whose parent is pid (the postmaster's auxiliary processes).
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []int
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so cut after the last ')'
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			if child, err := strconv.Atoi(strings.Fields(s)[0]); err == nil {
				kids = append(kids, child)
			}
		}
	}
	if len(kids) == 0 {
		t.Fatalf("postmaster %d has no child processes", pid)
	}
	return kids
}

func anyAlive(pids []int) bool {
	for _, p := range pids {
		if alive(p) {
			return true
		}
	}
	return false
}
