// Command write_note is an example agrun tool that declares the
// "filesystem" and "write" permissions: it writes a note to
// /notes/<name>.txt, replacing an older note of the same name. The operator
// mounts a directory at /notes read-write: mounts = ["./notes:/notes:rw"].
//
// Arguments: {"name":"groceries","text":"..."}. The name is a plain file
// name: letters, digits, '_', '-' and '.', not starting with '.'.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	guest "github.com/agcore/agrun/guest-sdk"
)

const (
	notesDir = "/notes"
	maxText  = 256 << 10
	maxName  = 64
)

// Args are the tool's arguments.
type Args struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// Result is the tool's answer.
type Result struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func main() {
	guest.Run(writeNote)
}

func writeNote(_ context.Context, in Args) (Result, error) {
	if err := checkName(in.Name); err != nil {
		return Result{}, err
	}
	if len(in.Text) > maxText {
		return Result{}, fmt.Errorf("text is %d bytes, at most %d", len(in.Text), maxText)
	}
	p := notesDir + "/" + in.Name + ".txt"
	if err := os.WriteFile(p, []byte(in.Text), 0o644); err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.EBADF): // EBADF: nothing mounted there
			return Result{}, fmt.Errorf("%s is not mounted", notesDir)
		case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
			return Result{}, fmt.Errorf("%s is not writable (mounted read-only?)", notesDir)
		}
		return Result{}, err
	}
	return Result{Path: p, Bytes: len(in.Text)}, nil
}

// checkName refuses anything but a plain file name: no separators, no
// "..", no hidden files.
func checkName(name string) error {
	if name == "" || len(name) > maxName {
		return fmt.Errorf("name must be 1 to %d characters", maxName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("name %q may contain only letters, digits, '_', '-' and '.' (no path separators)", name)
		}
	}
	if name[0] == '.' {
		return fmt.Errorf("name %q must not start with '.'", name)
	}
	return nil
}
