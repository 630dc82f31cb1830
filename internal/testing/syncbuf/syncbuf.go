// Package syncbuf is a bytes.Buffer that tests may write from one goroutine
// (a logger, a child's stderr) and read from another:
//
//	var logs syncbuf.Buffer
//	logger := slog.New(slog.NewTextHandler(&logs, nil))
//	... // code under test logs on its own goroutines
//	if strings.Contains(logs.String(), "refused") { ... }
//
// For tests only.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer behind a mutex. The zero value is an empty
// buffer ready to use; it is safe for concurrent use and must not be
// copied after first use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len returns the number of bytes written so far.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
