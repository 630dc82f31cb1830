package server

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/wasmtools"
)

// uploaded is an uploaded tool as the registry holds it: the wasm tool plus
// a count of the calls running on it, so that a replaced or deleted tool
// stays open until its last call ends. Closing the module at once would
// fail the calls that had already looked the tool up in the registry but
// not yet started the guest.
type uploaded struct {
	*wasmtools.Tool
	entry indexEntry

	mu      sync.Mutex
	active  int
	retired bool // replaced or deleted
	grace   bool // the grace period after retirement has passed
	closed  bool
}

var _ registry.Tool = (*uploaded)(nil)

func newUploaded(t *wasmtools.Tool, e indexEntry) *uploaded {
	return &uploaded{Tool: t, entry: e}
}

// errGone is the cause of a call that reached a tool already closed.
var errGone = errors.New("the tool was replaced or deleted")

// Execute implements registry.Tool: it runs the module, keeping it open
// for the duration of the call.
func (u *uploaded) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil, registry.NewError(registry.NotFound, u.Name(), errGone)
	}
	u.active++
	u.mu.Unlock()
	defer u.release()
	return u.Tool.Execute(ctx, args)
}

func (u *uploaded) release() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.active--
	u.maybeClose()
}

// retire marks the tool replaced or deleted: it is closed when its last
// call ends, but not before a short grace period, for calls that looked it
// up just before it left the registry.
func (u *uploaded) retire() {
	u.mu.Lock()
	u.retired = true
	u.mu.Unlock()
	time.AfterFunc(retireGrace, func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.grace = true
		u.maybeClose()
	})
}

// maybeClose closes the module if it is retired, past its grace period and
// idle. u.mu must be held.
func (u *uploaded) maybeClose() {
	if u.retired && u.grace && u.active == 0 && !u.closed {
		u.closed = true
		_ = u.Tool.Close(context.Background())
	}
}

// closeNow closes the module whatever runs on it (Server.Close).
func (u *uploaded) closeNow(ctx context.Context) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.closed {
		u.closed = true
		_ = u.Tool.Close(ctx)
	}
}
