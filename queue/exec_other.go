//go:build !unix

package queue

import "os/exec"

// inProcessGroup: elsewhere than Unix the cancel of a command's context kills
// the program alone (os/exec's default); its own children may run on.
func inProcessGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) {}
