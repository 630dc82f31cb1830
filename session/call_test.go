package session

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/agcore/agrun/registry"
)

// TestCallRecords: a call record is stored beside the messages, read back
// by Calls, skipped by the history readers and Info, and kept by Rewrite.
func TestCallRecords(t *testing.T) {
	st, err := OpenFiles(filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := st.Open("c1")
	if err != nil {
		t.Fatal(err)
	}
	s.Record(msg{"user", "read it"})
	audit := &registry.Audit{Source: "wasm", MemoryPeak: 2 << 20, Mounts: []registry.MountAudit{{Guest: "/docs", Writable: true, Opened: 1, ReadBytes: 21,
		Paths: []registry.PathAudit{{Path: "/docs/hello.txt", Ops: []string{"open", "read"}, ReadBytes: 21}}}}}
	s.RecordCall(Call{Tool: "read_file", ID: "call_1", DurationMS: 7, Audit: audit})
	s.RecordCall(Call{Tool: "read_file", ID: "call_2", DurationMS: 1, ErrorKind: registry.InvalidArguments})
	s.Record(msg{"assistant", "done"})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	check := func(when string) {
		t.Helper()
		raw, warnings, err := st.Messages("c1")
		if err != nil || len(warnings) != 0 {
			t.Fatalf("%s: Load: %v %v", when, err, warnings)
		}
		if msgs, err := Decode[msg](raw); err != nil || len(msgs) != 2 || msgs[1].Content != "done" {
			t.Fatalf("%s: history %+v %v: want only the two messages", when, msgs, err)
		}
		calls, _, err := st.Calls("c1")
		if err != nil || len(calls) != 2 {
			t.Fatalf("%s: Calls = %+v, %v", when, calls, err)
		}
		c := calls[0]
		if c.Session != "c1" || c.Tool != "read_file" || c.ID != "call_1" || c.DurationMS != 7 || c.Time.IsZero() ||
			c.Audit == nil || c.Audit.Mounts[0].Paths[0].Path != "/docs/hello.txt" || c.Audit.MemoryPeak != 2<<20 {
			t.Fatalf("%s: call 1 = %+v", when, c)
		}
		if calls[1].ErrorKind != registry.InvalidArguments || calls[1].Audit != nil {
			t.Fatalf("%s: call 2 = %+v", when, calls[1])
		}
		info, err := st.Info("c1")
		if err != nil || info.Messages != 2 || info.Turns != 1 {
			t.Fatalf("%s: Info = %+v, %v", when, info, err)
		}
	}
	check("written")
	// Rewrite (sessions compact) changes the messages and keeps the calls,
	// in time order among them.
	if _, _, err := st.Rewrite("c1", func(m []json.RawMessage) ([]json.RawMessage, error) { return m, nil }); err != nil {
		t.Fatal(err)
	}
	check("rewritten")
	recs, _, _ := st.Records("c1")
	if len(recs) != 4 || len(recs[1].Call) == 0 || len(recs[2].Call) == 0 || len(recs[3].Message) == 0 {
		t.Fatalf("rewritten records out of order: %+v", recs)
	}
}
