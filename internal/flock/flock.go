// Package flock takes a file's exclusive lock without waiting, on every
// platform agrun builds for: flock(2) on Unix, LockFileEx on Windows.
// The lock is the process's: it goes when the file is closed or the
// process ends, so a crashed agrun leaves no stale lock behind.
//
//	if err := flock.TryLock(f); errors.Is(err, flock.ErrLocked) { ... } // another process has it
package flock

import "errors"

// ErrLocked is returned by TryLock when another process holds the lock.
var ErrLocked = errors.New("locked by another process")
