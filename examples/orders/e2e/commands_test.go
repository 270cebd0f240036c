package e2e_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/examples/orders/internal/testenv"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// command is a started program and its output.
type command struct {
	cmd    *exec.Cmd
	output *bytes.Buffer
}

// run starts the program at path with env added to the test's environment; a program
// still running when t ends is killed.
func run(t *testing.T, path string, env ...string) *command {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), env...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &command{cmd, out}
}

// stop sends SIGTERM and checks the program exits 0 within 20 s.
func (c *command) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s after SIGTERM: %v; output:\n%s", c.cmd.Path, err, c.output)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not exit within 20 s of SIGTERM; output:\n%s", c.cmd.Path, c.output)
	}
}

// The README's run: the two commands, on one database (DATABASE_URL may be shared)
// and one NATS server; three orders POSTed take their units off the seeded stock, read
// back through GET /stock/widget; both commands stop on SIGTERM with exit status 0.
func TestCommands(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "./cmd/orders", "./cmd/inventory")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dsn := pgtest.ConnString(t, &pgtest.Options{Empty: true})
	url, _ := testenv.NATS(t)
	ordersAddr, inventoryAddr := freeAddr(t), freeAddr(t)
	inv := run(t, filepath.Join(bin, "inventory"), "DATABASE_URL="+dsn, "NATS_URL="+url, "ADDR="+inventoryAddr, "SEED_STOCK=widget=10,gadget=5")
	ord := run(t, filepath.Join(bin, "orders"), "DATABASE_URL="+dsn, "NATS_URL="+url, "ADDR="+ordersAddr)

	stock := func() (int, bool) {
		resp, err := http.Get("http://" + inventoryAddr + "/stock/widget")
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		var body struct {
			OnHand int `json:"on_hand"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
			return 0, false
		}
		return body.OnHand, true
	}
	testenv.WaitFor(t, time.Minute, "the inventory's API", func() bool { _, ok := stock(); return ok })
	testenv.WaitFor(t, time.Minute, "the orders API", func() bool {
		resp, err := http.Get("http://" + ordersAddr + "/orders/not-a-uuid")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusBadRequest
	})
	for range 3 {
		placeOrder(t, "http://"+ordersAddr, "widget", 2)
	}
	testenv.WaitFor(t, time.Minute, "widget at 10 - 3×2 = 4", func() bool { n, _ := stock(); return n == 4 })
	ord.stop(t)
	inv.stop(t)
	t.Logf("orders output:\n%s\ninventory output:\n%s", ord.output, inv.output)
}
