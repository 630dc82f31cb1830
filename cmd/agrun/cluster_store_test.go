//go:build cluster

package main

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/agcore/agrun/cluster/store"
	"slices"
	"testing"

	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/loop"
)

// TestDirSessionsContract: the JSON-lines session store of the cluster
// keeps the SessionStore contract for the records it is made for (session
// records: cluster.Storetest's arbitrary JSON is not a session line, so
// this store has its own test): a batch at the next seq is written, a
// batch at a seq it holds is not (written false, the first kept), a seq
// past the end is ErrSeqGap; what it stores is an ordinary session that
// the local path reads.
func TestDirSessionsContract(t *testing.T) {
	ctx := context.Background()
	st, err := session.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := dirSessions{st}
	var r sessionRecords
	user, _ := r.Message(loop.Message{Role: loop.RoleUser, Content: "hi"})
	req, _ := r.Request(loop.RequestInfo{Model: "m", Usage: loop.Usage{TotalTokens: 3}})
	reply, _ := r.Message(loop.Message{Role: loop.RoleAssistant, Content: "hello"})
	other, _ := r.Message(loop.Message{Role: loop.RoleAssistant, Content: "a second attempt"})

	if _, err := d.Load(ctx, "s1", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("load of a new session: %v", err)
	}
	if ok, err := d.Append(ctx, "s1", 0, []json.RawMessage{user}); !ok || err != nil {
		t.Fatalf("first append: %v %v", ok, err)
	}
	if ok, err := d.Append(ctx, "s1", 1, []json.RawMessage{req, reply}); !ok || err != nil {
		t.Fatalf("second append: %v %v", ok, err)
	}
	if ok, err := d.Append(ctx, "s1", 1, []json.RawMessage{other}); ok || err != nil {
		t.Fatalf("append at a held seq: %v %v", ok, err)
	}
	if _, err := d.Append(ctx, "s1", 9, []json.RawMessage{other}); !errors.Is(err, store.ErrSeqGap) {
		t.Fatalf("append past the end: %v", err)
	}
	if _, err := d.Append(ctx, "../x", 0, []json.RawMessage{user}); err == nil {
		t.Fatal("a bad session id was accepted")
	}
	recs, err := d.Load(ctx, "s1", 1)
	if err != nil || len(recs) != 2 {
		t.Fatalf("load from 1: %d records, %v", len(recs), err)
	}
	all, _ := d.Load(ctx, "s1", 0)
	h, err := r.History(all)
	if err != nil || len(h) != 2 || h[1].Content != "hello" {
		t.Fatalf("history %+v %v", h, err)
	}
	// The local path reads it: the messages, the request's tokens.
	raw, _, err := st.Load("s1")
	if err != nil || len(raw) != 2 {
		t.Fatalf("session.Load: %d %v", len(raw), err)
	}
	info, err := st.Info("s1")
	if err != nil || info.Tokens != 3 {
		t.Fatalf("info %+v %v", info, err)
	}
	ids, _ := d.List(ctx)
	if !slices.Contains(ids, "s1") {
		t.Fatalf("list %v", ids)
	}
	if err := d.Delete(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}
