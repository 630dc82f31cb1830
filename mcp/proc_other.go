//go:build !unix

package mcp

import (
	"context"
	"os"
	"os/exec"
)

var (
	sigTerm = os.Kill
	sigKill = os.Kill
)

// setProcessGroup does nothing here: only Unix has process groups, so a
// server's own children may outlive it on this platform.
func setProcessGroup(cmd *exec.Cmd) {}

// signalGroup kills the process pid (there is no group to signal).
func signalGroup(pid int, sig os.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Signal(sig)
	}
}

func endGroup(ctx context.Context, pgid int) {}
