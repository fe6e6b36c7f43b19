// Command enqueue: see 'go run ./cmd/enqueue --help'. The command itself lives in
// internal/cli so tests can run it in-process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/stageq/stageq/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cli.Execute(ctx, cli.NewEnqueueCommand(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
