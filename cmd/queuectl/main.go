// Command queuectl: see 'go run ./cmd/queuectl --help'. The command itself lives in
// internal/cli so tests can run it in-process.
package main

import "github.com/stageq/stageq/internal/cli"

func main() { cli.Main(cli.NewQueuectlCommand()) }
