package sessiontest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
)

// AdminOptions say how RunAdmin puts a session of the store under test
// in use.
type AdminOptions struct {
	// Hold puts session id of s in use, as a run going on elsewhere does
	// (Files: another process's open session), until release is called.
	// Nil: the store sees no runs itself (Mem, PostgreSQL), and the suite
	// wraps each store in a session.Guarded whose InUse reports the
	// sessions it holds — what a cluster does with its workflows.
	Hold func(t *testing.T, s session.Admin, id string) (release func())
}

// holds is the InUse of the Guarded stores of RunAdmin.
type holds struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (h *holds) inUse(_ context.Context, id string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids[id], nil
}

// RunAdmin runs the session.Admin contract — what `agrun sessions`
// does to whole sessions: Summaries and Summary (the Info of the
// records, most recently used first), RemoveSession (with and without a
// cutoff), PruneStore, CompactSession (in place: the same number of
// records, the other records kept, a failure changing nothing), and the
// refusal of each of them for a session in use — against the stores
// newStore makes (each new and empty).
func RunAdmin(t *testing.T, newStore func(t *testing.T) session.Admin, opts AdminOptions) {
	ctx := context.Background()
	open := func(t *testing.T) (session.Admin, func(id string) (release func())) {
		s := newStore(t)
		if opts.Hold != nil {
			return s, func(id string) func() { return opts.Hold(t, s, id) }
		}
		h := &holds{ids: map[string]bool{}}
		g := &session.Guarded{Admin: s, InUse: h.inUse}
		return g, func(id string) func() {
			h.mu.Lock()
			h.ids[id] = true
			h.mu.Unlock()
			return func() {
				h.mu.Lock()
				delete(h.ids, id)
				h.mu.Unlock()
			}
		}
	}
	var c session.Codec
	must := func(b json.RawMessage, err error) json.RawMessage {
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	big := strings.Repeat("result line\n", 200) // over loop.CompactThreshold
	// turn is one prompt answered after a tool call: 5 records.
	turn := func(prompt, callID string) []json.RawMessage {
		return []json.RawMessage{
			must(c.Message(loop.Message{Role: loop.RoleUser, Content: prompt})),
			must(c.Request(loop.RequestInfo{Model: "m-" + prompt, Usage: loop.Usage{TotalTokens: 10}})),
			must(c.Message(loop.Message{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: callID, Name: "read", Arguments: `{}`}}})),
			must(c.Message(loop.Message{Role: loop.RoleTool, ToolCallID: callID, Name: "read", Content: big})),
			must(c.Message(loop.Message{Role: loop.RoleAssistant, Content: "done " + prompt})),
		}
	}
	appendAll := func(t *testing.T, s session.Store, id string, recs []json.RawMessage) {
		t.Helper()
		have, err := s.Load(ctx, id, 0)
		if err != nil && !errors.Is(err, session.ErrNotFound) {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, id, int64(len(have)), recs); err != nil {
			t.Fatal(err)
		}
	}
	// tick lets the clock of "last used" move on between appends (a
	// file's modification time, PostgreSQL's now()).
	tick := func() { time.Sleep(20 * time.Millisecond) }

	t.Run("Summaries", func(t *testing.T) {
		s, _ := open(t)
		if infos, err := s.Summaries(ctx); err != nil || len(infos) != 0 {
			t.Fatalf("Summaries of an empty store = %+v, %v", infos, err)
		}
		appendAll(t, s, "a", turn("first", "c1"))
		tick()
		appendAll(t, s, "b", turn("other", "c1"))
		tick()
		appendAll(t, s, "a", turn("second", "c2")) // a is now the most recent
		infos, err := s.Summaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 2 || infos[0].ID != "a" || infos[1].ID != "b" {
			t.Fatalf("Summaries = %+v, want a then b (most recently used first)", infos)
		}
		a := infos[0]
		if a.Turns != 2 || a.Messages != 8 || a.Model != "m-second" || a.Tokens != 20 || a.FirstPrompt != "first" {
			t.Errorf("Info of a = %+v", a)
		}
		if a.Updated.IsZero() || !infos[1].Updated.Before(a.Updated) || a.Created.IsZero() {
			t.Errorf("times: a %v/%v, b updated %v", a.Created, a.Updated, infos[1].Updated)
		}
		one, err := s.Summary(ctx, "a")
		if err != nil || one.ID != "a" || one.Turns != 2 || one.Tokens != 20 || !one.Updated.Equal(a.Updated) {
			t.Errorf("Summary(a) = %+v, %v; want %+v", one, err, a)
		}
		if _, err := s.Summary(ctx, "nobody"); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("Summary of an unknown session: %v, want ErrNotFound", err)
		}
		if _, err := s.Summary(ctx, "../x"); !errors.Is(err, session.ErrBadID) {
			t.Errorf("Summary(../x): %v, want ErrBadID", err)
		}
	})

	t.Run("RemoveSession", func(t *testing.T) {
		s, hold := open(t)
		appendAll(t, s, "old", turn("p", "c1"))
		tick()
		cutoff := time.Now()
		tick()
		appendAll(t, s, "new", turn("p", "c1"))
		if ok, err := s.RemoveSession(ctx, "new", cutoff); err != nil || ok {
			t.Errorf("RemoveSession(new, a cutoff before its use) = %v, %v; want kept", ok, err)
		}
		release := hold("old")
		if ok, err := s.RemoveSession(ctx, "old", time.Time{}); !errors.Is(err, session.ErrLocked) || ok {
			t.Errorf("RemoveSession of a session in use = %v, %v; want ErrLocked", ok, err)
		}
		release()
		if ok, err := s.RemoveSession(ctx, "old", cutoff); err != nil || !ok {
			t.Errorf("RemoveSession(old, a cutoff after its use) = %v, %v; want removed", ok, err)
		}
		if ok, err := s.RemoveSession(ctx, "new", time.Time{}); err != nil || !ok {
			t.Errorf("RemoveSession(new) = %v, %v; want removed", ok, err)
		}
		for _, id := range []string{"old", "new"} {
			if _, err := s.Load(ctx, id, 0); !errors.Is(err, session.ErrNotFound) {
				t.Errorf("Load(%s) after RemoveSession: %v, want ErrNotFound", id, err)
			}
			if _, err := s.RemoveSession(ctx, id, time.Time{}); !errors.Is(err, session.ErrNotFound) {
				t.Errorf("RemoveSession(%s) again: %v, want ErrNotFound", id, err)
			}
		}
		if _, err := s.RemoveSession(ctx, "a/b", time.Time{}); !errors.Is(err, session.ErrBadID) {
			t.Errorf("RemoveSession(a/b): %v, want ErrBadID", err)
		}
	})

	t.Run("Prune", func(t *testing.T) {
		s, hold := open(t)
		appendAll(t, s, "old1", turn("p", "c1"))
		appendAll(t, s, "old2", turn("p", "c1"))
		appendAll(t, s, "busy", turn("p", "c1"))
		tick()
		cutoff := time.Now()
		tick()
		appendAll(t, s, "recent", turn("p", "c1"))
		release := hold("busy")
		defer release()
		p, err := session.PruneStore(ctx, s, cutoff)
		if err != nil {
			t.Fatal(err)
		}
		var removed []string
		for _, in := range p.Removed {
			removed = append(removed, in.ID)
		}
		if strings.Join(removed, " ") != "old2 old1" || p.Kept != 1 || len(p.Skipped) != 1 || !errors.Is(p.Skipped["busy"], session.ErrLocked) {
			t.Errorf("PruneStore = removed %q, kept %d, skipped %v; want old2 old1, 1, busy locked", removed, p.Kept, p.Skipped)
		}
		ids, err := s.List(ctx)
		if err != nil || strings.Join(ids, " ") != "busy recent" {
			t.Errorf("List after PruneStore = %q, %v", ids, err)
		}
	})

	t.Run("Compact", func(t *testing.T) {
		s, hold := open(t)
		recs := append(turn("one", "c1"), turn("two", "c2")...)
		appendAll(t, s, "s", recs)
		release := hold("s")
		if _, _, err := s.CompactSession(ctx, "s", 1); !errors.Is(err, session.ErrLocked) {
			t.Errorf("CompactSession of a session in use: %v, want ErrLocked", err)
		}
		release()
		orig, err := s.Load(ctx, "s", 0)
		if err != nil {
			t.Fatal(err)
		}
		before, after, err := s.CompactSession(ctx, "s", 1)
		if err != nil {
			t.Fatal(err)
		}
		if after >= before || before <= int64(len(big)) {
			t.Errorf("CompactSession: %d → %d bytes, want smaller", before, after)
		}
		got, err := s.Load(ctx, "s", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(orig) {
			t.Fatalf("CompactSession left %d records of %d: a session's seqs must stay", len(got), len(orig))
		}
		for i := range got {
			var o, g session.Record
			if json.Unmarshal(orig[i], &o) != nil || json.Unmarshal(got[i], &g) != nil {
				t.Fatalf("record %d does not decode", i)
			}
			if i == 3 { // the first turn's big result
				var m loop.Message
				if err := json.Unmarshal(g.Message, &m); err != nil || m.Content == big || m.ToolCallID != "c1" || len(m.Content) > 500 {
					t.Errorf("the first turn's result after CompactSession: %.80q, %v", m.Content, err)
				}
				if !g.Time.Equal(o.Time) {
					t.Errorf("the compacted record's time %v, want %v", g.Time, o.Time)
				}
				continue
			}
			if string(o.Message) != string(g.Message) || string(o.Request) != string(g.Request) || !g.Time.Equal(o.Time) {
				t.Errorf("record %d changed: %s → %s", i, orig[i], got[i])
			}
		}
		// Nothing left to compact: the same size again.
		if b2, a2, err := s.CompactSession(ctx, "s", 1); err != nil || b2 != after || a2 != after {
			t.Errorf("CompactSession again = %d → %d, %v; want %d unchanged", b2, a2, err, after)
		}
		// keep 0: the last turn's result goes too; the records appended
		// after still follow at their seqs.
		if _, _, err := s.CompactSession(ctx, "s", 0); err != nil {
			t.Fatal(err)
		}
		if w, err := s.Append(ctx, "s", int64(len(orig)), turn("three", "c3")); err != nil || !w {
			t.Errorf("Append after CompactSession = %v, %v", w, err)
		}
		if _, _, err := s.CompactSession(ctx, "nobody", 1); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("CompactSession of an unknown session: %v, want ErrNotFound", err)
		}
		if _, _, err := s.CompactSession(ctx, "..", 1); !errors.Is(err, session.ErrBadID) {
			t.Errorf("CompactSession(..): %v, want ErrBadID", err)
		}
	})

	t.Run("CompactRefusesBadMessage", func(t *testing.T) {
		s, _ := open(t)
		bad := json.RawMessage(`{"time":"2026-01-02T03:04:05Z","message":{"role":7}}`)
		recs := append(turn("one", "c1"), bad)
		appendAll(t, s, "s", recs)
		orig, _ := s.Load(ctx, "s", 0)
		var me *session.MessageError
		if _, _, err := s.CompactSession(ctx, "s", 0); !errors.As(err, &me) {
			t.Errorf("CompactSession with a message that does not decode: %v, want a *MessageError", err)
		}
		got, _ := s.Load(ctx, "s", 0)
		assertRecords(t, got, orig)
	})

	t.Run("CompactWhileAppending", func(t *testing.T) {
		// A compaction and a run's appends on one session: every append
		// lands at its seq, whatever the order (the store's lock), and
		// no record is lost or doubled.
		s, _ := open(t)
		appendAll(t, s, "s", turn("zero", "c0"))
		next := int64(5)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _, err := s.CompactSession(ctx, "s", 1)
				if err != nil && !errors.Is(err, session.ErrLocked) { // Files: an append holds the file
					t.Errorf("CompactSession during appends: %v", err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
		for i := range 10 {
			recs := turn("p", "c"+string(rune('a'+i)))
			w, err := s.Append(ctx, "s", next, recs)
			if err != nil || !w {
				t.Errorf("Append at %d during compactions = %v, %v", next, w, err)
				break
			}
			next += int64(len(recs))
		}
		close(stop)
		wg.Wait()
		got, err := s.Load(ctx, "s", 0)
		if err != nil || int64(len(got)) != next {
			t.Fatalf("after appends and compactions: %d records, %v; want %d", len(got), err, next)
		}
	})
}
