// Package cli builds stageq's commands (enqueue, worker, queuectl) as cobra
// commands, so each main package stays a few lines and every command can be
// run in-process by tests.
package cli
