package flock_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agcore/agrun/internal/flock"
)

// A second open of the file cannot take the lock while the first holds
// it, and can once the first is closed.
func TestTryLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	a, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := flock.TryLock(a); err != nil {
		t.Fatal(err)
	}
	b, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := flock.TryLock(b); !errors.Is(err, flock.ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	a.Close()
	if err := flock.TryLock(b); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
}
