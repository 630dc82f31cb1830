//go:build unix

// Package leak observes what a test can leave behind on the host: open
// file descriptors, child processes, and changes to a directory tree.
//
//	before := leak.OpenFDs(t)
//	... run guests, close everything ...
//	if after := leak.OpenFDs(t); before >= 0 && after > before { t.Errorf(...) }
//
//	tree := leak.Tree(t, root, mount) // everything under root but the mount
//	... let a guest loose on mount ...
//	if leak.Tree(t, root, mount) != tree { t.Error("the guest changed the host") }
//
// The functions are safe for concurrent use; what they observe is the
// whole process, so tests that compare counts should not run in parallel.
package leak

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// OpenFDs returns the number of file descriptors the process holds, or -1
// where /proc/self/fd cannot be read (not Linux): callers compare only
// counts that are not negative.
func OpenFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// ProcessGone reports whether pid no longer runs: absent, or a zombie (in
// a container nobody may reap it).
func ProcessGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// pid (comm) state ...
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// Tree fingerprints everything under root except the skip subtree (none
// if skip is ""): one line per entry with its path relative to root, type
// and mode, size, modification time, and a symlink's target or a regular
// file's SHA-256. Two fingerprints are equal when nothing changed; the
// text says what did. It fails the test if root cannot be walked.
func Tree(tb testing.TB, root, skip string) string {
	tb.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skip != "" && p == skip {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		line := fmt.Sprintf("%s %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		tb.Fatalf("leak: walking %s: %v", root, err)
	}
	return strings.Join(lines, "\n") // WalkDir's lexical order
}
