// Command worker: see 'go run ./cmd/worker --help'. The command itself lives in
// internal/cli so tests can run it in-process.
package main

import "github.com/stageq/stageq/internal/cli"

func main() { cli.Main(cli.NewWorkerCommand()) }
