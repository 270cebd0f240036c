// Command outbox runs the outbox relay as a daemon and operates an outbox schema:
// migrations, status, dead letters, replays and discards. See docs/configuration.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxkit/outbox/cmd/outbox/internal/cli"
)

func main() {
	signal.Ignore(syscall.SIGHUP) // documented: configuration is read at start only
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Env: os.Environ()})
	stop()
	os.Exit(code)
}
