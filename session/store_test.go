package session_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agcore/agrun/internal/flock"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/session/sessiontest"
)

// TestFilesStore: the JSON-lines files keep the Store contract for
// session records.
func TestFilesStore(t *testing.T) {
	sessiontest.Run(t, func(t *testing.T) session.Store {
		st, err := session.OpenFiles(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, sessiontest.Options{})
}

// TestMemStore: Mem keeps the contract for any JSON, byte for byte.
func TestMemStore(t *testing.T) {
	sessiontest.Run(t, func(t *testing.T) session.Store { return &session.Mem{} }, sessiontest.Options{Verbatim: true})
}

// TestFilesStoreRefusesOtherJSON: a record that is not a session line
// (exactly one of message, request, call, decision) is refused, and what
// is appended through the Store reads as an ordinary session.
func TestFilesStoreRefusesOtherJSON(t *testing.T) {
	ctx := context.Background()
	st, err := session.OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"v":1}`, `[]`, `{"time":"2026-01-01T00:00:00Z"}`, `{"message":{},"call":{}}`} {
		if w, err := st.Append(ctx, "s", 0, []json.RawMessage{json.RawMessage(bad)}); err == nil || w {
			t.Errorf("Append(%s) = %v, %v; want an error", bad, w, err)
		}
	}
	var c session.Codec
	user, _ := c.Message(loop.Message{Role: loop.RoleUser, Content: "hi"})
	req, _ := c.Request(loop.RequestInfo{Model: "m", Usage: loop.Usage{TotalTokens: 3}})
	reply, _ := c.Message(loop.Message{Role: loop.RoleAssistant, Content: "hello"})
	if w, err := st.Append(ctx, "s", 0, []json.RawMessage{user, req, reply}); err != nil || !w {
		t.Fatalf("Append = %v, %v", w, err)
	}
	msgs, _, err := st.Messages("s")
	if err != nil {
		t.Fatal(err)
	}
	h, err := session.Decode[loop.Message](msgs)
	if err != nil || len(h) != 2 || h[1].Content != "hello" {
		t.Fatalf("history %+v, %v", h, err)
	}
	if info, err := st.Info("s"); err != nil || info.Tokens != 3 || info.Model != "m" {
		t.Fatalf("info %+v, %v", info, err)
	}
}

// TestFilesAdmin: the JSON-lines files keep the Admin contract (`agrun
// sessions rm/prune/compact/export`); a session in use is one another
// process has open.
func TestFilesAdmin(t *testing.T) {
	sessiontest.RunAdmin(t, func(t *testing.T) session.Admin {
		st, err := session.OpenFiles(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, sessiontest.AdminOptions{Hold: func(t *testing.T, s session.Admin, id string) func() {
		// The lock of a process that has the session open (Open itself
		// would repair the file, making it look used now).
		f, err := os.OpenFile(filepath.Join(s.(*session.Files).Dir(), id+".jsonl"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := flock.TryLock(f); err != nil {
			t.Fatal(err)
		}
		return func() { f.Close() }
	}})
}

// TestMemAdmin: Mem keeps the Admin contract, in use through
// session.Guarded.
func TestMemAdmin(t *testing.T) {
	sessiontest.RunAdmin(t, func(t *testing.T) session.Admin { return &session.Mem{} }, sessiontest.AdminOptions{})
}
