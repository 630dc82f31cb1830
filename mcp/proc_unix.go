//go:build unix

package mcp

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// setProcessGroup starts cmd as the leader of a new process group, so the
// server and everything it spawns can be signalled at once.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}

// endGroup ends what is left of the process group pgid after its leader
// exited: SIGTERM, up to 500 ms for the members to go, then SIGKILL.
func endGroup(ctx context.Context, pgid int) {
	if errors.Is(syscall.Kill(-pgid, syscall.SIGTERM), syscall.ESRCH) {
		return
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
