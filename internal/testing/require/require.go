// Package require holds the assertions the tests of several packages
// share, in the style of wazero's internal/testing/require.
//
//	e := require.Kind(t, err, registry.Timeout) // fails the test unless it is
//	t.Log(e.Message)
package require

import (
	"errors"
	"io"
	"os"
	"testing"

	"github.com/agcore/agrun/registry"
)

// Kind fails the test now unless err is (or wraps) a *registry.Error of
// kind k, and returns that error.
func Kind(tb testing.TB, err error, k registry.Kind) *registry.Error {
	tb.Helper()
	var e *registry.Error
	if !errors.As(err, &e) {
		tb.Fatalf("error = %v (%T), want a *registry.Error of kind %s", err, err, k)
	}
	if e.Kind != k {
		tb.Fatalf("kind = %s, want %s (error: %v)", e.Kind, k, err)
	}
	return e
}

// Stdout runs fn, an Example function a test runs against real servers,
// and fails the test unless what it printed on os.Stdout is want.
func Stdout(tb testing.TB, fn func(), want string) {
	tb.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	out := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); out <- b }()
	stdout := os.Stdout
	os.Stdout = w
	func() {
		defer func() { os.Stdout = stdout }()
		fn()
	}()
	w.Close()
	if got := string(<-out); got != want {
		tb.Fatalf("printed %q, want %q", got, want)
	}
}
