package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has Linux end the child if the demo dies first, so no
// simulator outlives a killed demo.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
