// Package sessiontest is the one test suite of the session.Store
// contract: every implementation runs it — session.Files (the JSON-lines
// files), session.Mem and session/pgstore (PostgreSQL) — so that they
// behave alike.
//
//	func TestMyStore(t *testing.T) {
//		sessiontest.Run(t, func(t *testing.T) session.Store {
//			return newEmptyStore(t)
//		}, sessiontest.Options{Verbatim: true})
//	}
//
// The factory is called once per subtest and must return a new, empty
// store (a fresh directory or database).
package sessiontest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agcore/agrun/session"
)

// rec makes a record of a test: a session line (Record's JSON, as
// Files writes it back) whose message is the JSON that format and a
// make.
func rec(format string, a ...any) json.RawMessage {
	return json.RawMessage(`{"time":"2026-01-02T03:04:05Z","message":` + fmt.Sprintf(format, a...) + `}`)
}

// raw is JSON as it is, not wrapped as a session line.
func raw(s string) json.RawMessage { return json.RawMessage(s) }

// Options say what a store under test keeps beyond session records.
type Options struct {
	// Verbatim: the store keeps any JSON byte for byte (PostgreSQL's,
	// Mem), not only the canonical encoding of a Record (Files, which
	// re-encodes each record as its line). The round-trip test then uses
	// records a normalising store would change.
	Verbatim bool
}

// Run runs the Store contract against the stores
// that newStore makes: byte-exact round trips, Load from an offset,
// ErrNotFound, idempotent Append (the first writer's records stay),
// ErrSeqGap, ErrTooLarge, ErrBadID and refused batches, sorted List,
// Delete, and concurrent Appends at one seq with exactly one winner.
func Run(t *testing.T, newStore func(t *testing.T) session.Store, opts Options) {
	ctx := context.Background()

	// Records that a normalising store (jsonb, a JSON re-encoder) would
	// change: key order, duplicate keys, spaces, number spellings,
	// escapes, NUL, non-ASCII.
	exact := []json.RawMessage{
		rec(`{"role":"user","content":"hello"}`),
		rec(`{"b":1,"a":2}`),
		rec(`{"spaced":[1,2]}`),
		rec(`{"n":100,"big":123456789012345678901234567890}`),
		rec(`{"esc":"\u0000é\"\\\n","raw":"é 😀"}`),
		rec(`[]`),
		rec(`"just a string"`),
		rec(`null`),
	}
	if opts.Verbatim {
		// Records that a normalising store (jsonb, a JSON re-encoder)
		// would change: key order, duplicate keys, spaces, number
		// spellings, escapes, NUL, non-ASCII, any JSON value.
		exact = []json.RawMessage{
			raw(`{"role":"user","content":"hello"}`),
			raw(`{"b":1,"a":2}`),
			raw(`{"a":1,"a":2}`),
			raw(`{ "spaced" : [ 1 , 2 ] }`),
			raw(`{"n":1.0e+02,"m":-0,"big":123456789012345678901234567890}`),
			raw(`{"esc":"\u0000\u00e9\"\\\/\n","raw":"é 😀"}`),
			raw(`[]`),
			raw(`"just a string"`),
			raw(`null`),
		}
	}

	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		if w, err := s.Append(ctx, "s1", 0, exact[:4]); err != nil || !w {
			t.Fatalf("Append at 0 = %v, %v", w, err)
		}
		if w, err := s.Append(ctx, "s1", 4, exact[4:]); err != nil || !w {
			t.Fatalf("Append at 4 = %v, %v", w, err)
		}
		got, err := s.Load(ctx, "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		assertRecords(t, got, exact)
	})

	t.Run("LoadFrom", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Append(ctx, "s", 0, exact[:5]); err != nil {
			t.Fatal(err)
		}
		for from, want := range map[int64][]json.RawMessage{0: exact[:5], 1: exact[1:5], 4: exact[4:5], 5: {}, 100: {}} {
			got, err := s.Load(ctx, "s", from)
			if err != nil {
				t.Errorf("Load(from %d): %v", from, err)
				continue
			}
			if got == nil {
				t.Errorf("Load(from %d) = nil, want a non-nil (maybe empty) slice", from)
			}
			assertRecords(t, got, want)
		}
		if _, err := s.Load(ctx, "s", -1); err == nil {
			t.Error("Load(from -1) succeeded")
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Load(ctx, "nobody", 0); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("Load of an unknown session: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "nobody"); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("Delete of an unknown session: %v, want ErrNotFound", err)
		}
		if ids, err := s.List(ctx); err != nil || len(ids) != 0 {
			t.Errorf("List of an empty store = %q, %v", ids, err)
		}
	})

	t.Run("Idempotent", func(t *testing.T) {
		s := newStore(t)
		first := []json.RawMessage{rec(`{"attempt":1,"i":0}`), rec(`{"attempt":1,"i":1}`)}
		if w, err := s.Append(ctx, "s", 0, first); err != nil || !w {
			t.Fatalf("first Append = %v, %v", w, err)
		}
		// A retried step writes at the same seq: nothing changes, and
		// it is told so.
		for _, retry := range []struct {
			seq  int64
			recs []json.RawMessage
		}{
			{0, []json.RawMessage{rec(`{"attempt":2,"i":0}`)}},
			{0, []json.RawMessage{rec(`{"attempt":2,"i":0}`), rec(`{"attempt":2,"i":1}`), rec(`{"attempt":2,"i":2}`)}},
			{1, []json.RawMessage{rec(`{"attempt":2,"i":1}`), rec(`{"attempt":2,"i":2}`)}},
			{0, first},
		} {
			w, err := s.Append(ctx, "s", retry.seq, retry.recs)
			if err != nil || w {
				t.Errorf("Append of %d records at held seq %d = %v, %v; want false, nil", len(retry.recs), retry.seq, w, err)
			}
		}
		got, err := s.Load(ctx, "s", 0)
		if err != nil {
			t.Fatal(err)
		}
		assertRecords(t, got, first)
		if w, err := s.Append(ctx, "s", 2, []json.RawMessage{rec(`{"i":2}`)}); err != nil || !w {
			t.Errorf("Append at the next seq after retries = %v, %v", w, err)
		}
	})

	t.Run("SeqGap", func(t *testing.T) {
		s := newStore(t)
		if w, err := s.Append(ctx, "s", 1, []json.RawMessage{rec(`1`)}); !errors.Is(err, session.ErrSeqGap) || w {
			t.Errorf("first Append at 1 = %v, %v; want ErrSeqGap", w, err)
		}
		if _, err := s.Load(ctx, "s", 0); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("a refused first Append created the session: Load error %v", err)
		}
		if _, err := s.Append(ctx, "s", 0, []json.RawMessage{rec(`0`), rec(`1`)}); err != nil {
			t.Fatal(err)
		}
		for _, seq := range []int64{3, 100} {
			if w, err := s.Append(ctx, "s", seq, []json.RawMessage{rec(`9`)}); !errors.Is(err, session.ErrSeqGap) || w {
				t.Errorf("Append at %d after 2 records = %v, %v; want ErrSeqGap", seq, w, err)
			}
		}
		got, _ := s.Load(ctx, "s", 0)
		assertRecords(t, got, []json.RawMessage{rec(`0`), rec(`1`)})
	})

	t.Run("Refused", func(t *testing.T) {
		s := newStore(t)
		big := make([]byte, session.MaxRecordBytes+1)
		for i := range big {
			big[i] = ' '
		}
		big[0] = '1' // valid JSON with trailing spaces
		if w, err := s.Append(ctx, "s", 0, []json.RawMessage{rec(`{}`), big}); !errors.Is(err, session.ErrTooLarge) || w {
			t.Errorf("Append of a record over MaxRecordBytes = %v, %v; want ErrTooLarge", w, err)
		}
		for name, recs := range map[string][]json.RawMessage{
			"no records":      nil,
			"invalid JSON":    {rec(`{}`), raw(`{"a":`)},
			"empty record":    {raw(``)},
			"two JSON values": {raw(`{} {}`)},
			"two lines":       {raw("{\n}")},
		} {
			if w, err := s.Append(ctx, "s", 0, recs); err == nil || w {
				t.Errorf("Append of %s = %v, %v; want an error", name, w, err)
			}
		}
		if w, err := s.Append(ctx, "s", -1, []json.RawMessage{rec(`{}`)}); err == nil || w {
			t.Errorf("Append at -1 = %v, %v; want an error", w, err)
		}
		if _, err := s.Load(ctx, "s", 0); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("a refused batch wrote something: Load error %v", err)
		}
		// Large but within the cap: kept whole.
		mib := rec(`{"blob":"%s"}`, strings.Repeat("x", 1<<20))
		if w, err := s.Append(ctx, "s", 0, []json.RawMessage{mib}); err != nil || !w {
			t.Fatalf("Append of a 1 MiB record = %v, %v", w, err)
		}
		got, err := s.Load(ctx, "s", 0)
		if err != nil {
			t.Fatal(err)
		}
		assertRecords(t, got, []json.RawMessage{mib})
	})

	t.Run("BadIDs", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"", "-x", ".x", "_x", "a/b", "../x", "..", "a b", "é", "a\x00", strings.Repeat("a", 65)} {
			if _, err := s.Append(ctx, id, 0, []json.RawMessage{rec(`{}`)}); !errors.Is(err, session.ErrBadID) {
				t.Errorf("Append(%q): %v, want ErrBadID", id, err)
			}
			if _, err := s.Load(ctx, id, 0); !errors.Is(err, session.ErrBadID) {
				t.Errorf("Load(%q): %v, want ErrBadID", id, err)
			}
			if err := s.Delete(ctx, id); !errors.Is(err, session.ErrBadID) {
				t.Errorf("Delete(%q): %v, want ErrBadID", id, err)
			}
		}
		long := strings.Repeat("a", 64)
		if _, err := s.Append(ctx, long, 0, []json.RawMessage{rec(`{}`)}); err != nil {
			t.Errorf("Append to a 64-byte id: %v", err)
		}
	})

	t.Run("List", func(t *testing.T) {
		s := newStore(t)
		ids := []string{"b", "a-1", "Z9", "a", "A", "a.b", "0", "a_"}
		for _, id := range ids {
			if _, err := s.Append(ctx, id, 0, []json.RawMessage{rec(`{"id":%q}`, id)}); err != nil {
				t.Fatal(err)
			}
		}
		// More records in one session do not list it twice.
		if _, err := s.Append(ctx, "a", 1, []json.RawMessage{rec(`1`), rec(`2`)}); err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(ids)
		slices.Sort(want) // byte order: "0" < "A" < "Z9" < "a" < "a-1" < "a.b" < "a_" < "b"
		got, err := s.List(ctx)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("List = %q, %v; want %q", got, err, want)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"keep", "drop"} {
			if _, err := s.Append(ctx, id, 0, []json.RawMessage{rec(`{"id":%q}`, id), rec(`2`)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Delete(ctx, "drop"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx, "drop", 0); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("Load after Delete: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "drop"); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("second Delete: %v, want ErrNotFound", err)
		}
		if ids, err := s.List(ctx); err != nil || !slices.Equal(ids, []string{"keep"}) {
			t.Errorf("List after Delete = %q, %v", ids, err)
		}
		if got, err := s.Load(ctx, "keep", 0); err != nil || len(got) != 2 {
			t.Errorf("the other session after Delete: %d records, %v", len(got), err)
		}
		// The id can start again from 0.
		if w, err := s.Append(ctx, "drop", 0, []json.RawMessage{rec(`"new"`)}); err != nil || !w {
			t.Fatalf("Append at 0 after Delete = %v, %v", w, err)
		}
		got, _ := s.Load(ctx, "drop", 0)
		assertRecords(t, got, []json.RawMessage{rec(`"new"`)})
	})

	t.Run("Copies", func(t *testing.T) {
		s := newStore(t)
		buf := []byte(rec(`{"v":"original"}`))
		if _, err := s.Append(ctx, "s", 0, []json.RawMessage{buf}); err != nil {
			t.Fatal(err)
		}
		copy(buf, rec(`{"v":"CHANGED!"}`))
		got, _ := s.Load(ctx, "s", 0)
		assertRecords(t, got, []json.RawMessage{rec(`{"v":"original"}`)})
		got[0][len(got[0])-4] = 'X'
		again, _ := s.Load(ctx, "s", 0)
		assertRecords(t, again, []json.RawMessage{rec(`{"v":"original"}`)})
	})

	t.Run("ConcurrentAppend", func(t *testing.T) {
		s := newStore(t)
		const writers = 8
		for seq := int64(0); seq < 5; seq++ {
			// Every writer has a batch for seq (of 1 to 3 records); one
			// wins, the others find its records.
			var wg sync.WaitGroup
			type result struct {
				w   bool
				err error
			}
			results := make([]result, writers)
			batches := make([][]json.RawMessage, writers)
			for i := range writers {
				for j := range 1 + i%3 {
					batches[i] = append(batches[i], rec(`{"writer":%d,"seq":%d,"j":%d}`, i, seq, j))
				}
			}
			start := make(chan struct{})
			for i := range writers {
				wg.Go(func() {
					<-start
					w, err := s.Append(ctx, "race", seq, batches[i])
					results[i] = result{w, err}
				})
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, r := range results {
				switch {
				case r.err != nil:
					t.Fatalf("seq %d writer %d: %v", seq, i, r.err)
				case r.w && winner >= 0:
					t.Fatalf("seq %d: writers %d and %d both wrote", seq, winner, i)
				case r.w:
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("seq %d: no writer wrote", seq)
			}
			got, err := s.Load(ctx, "race", seq)
			if err != nil {
				t.Fatal(err)
			}
			assertRecords(t, got, batches[winner])
			// The winner's batch may be several records: the next round
			// appends after them.
			seq += int64(len(batches[winner])) - 1
		}
	})
}

// assertRecords fails unless got holds exactly the bytes of want.
func assertRecords(t *testing.T, got, want []json.RawMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d:\n got %s\nwant %s", len(got), len(want), show(got), show(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d = %q, want the bytes %q", i, got[i], want[i])
		}
	}
}

func show(rs []json.RawMessage) string {
	var b strings.Builder
	for _, r := range rs {
		if len(r) > 80 {
			r = append(r[:80:80], "..."...)
		}
		b.WriteString(string(r))
		b.WriteByte(' ')
	}
	return b.String()
}
