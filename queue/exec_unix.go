//go:build unix

package queue

import (
	"errors"
	"os/exec"
	"syscall"
)

// inProcessGroup starts cmd as the leader of a process group of its own, and
// makes the cancel of its context stop that whole group (SIGTERM), not only
// the program: a script's own children would otherwise run on after the task
// was cancelled (its lease lost, the worker shutting down) while the task runs
// again elsewhere, and hold the output pipe, so that the worker waited for
// them past its shutdown grace.
func inProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return signalGroup(cmd, syscall.SIGTERM) }
}

// killGroup ends whatever is left of cmd's process group (SIGKILL), once the
// command has been cancelled and waited for.
func killGroup(cmd *exec.Cmd) {
	_ = signalGroup(cmd, syscall.SIGKILL)
}

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // the group is gone already
	}
	return err
}
