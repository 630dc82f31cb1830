package session

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Rewrite replaces a session's messages atomically, keeping each record's
// time when the count is unchanged; it refuses a session another holder
// has open and an unknown one; a session opened after a rewrite appends
// to the new file.
func TestRewrite(t *testing.T) {
	st, err := OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := st.Open("r1")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{`{"n":1,"big":"` + strings.Repeat("x", 10000) + `"}`, `{"n":2}`} {
		if err := s.Append(json.RawMessage(m)); err != nil {
			t.Fatal(err)
		}
	}
	shrink := func(msgs []json.RawMessage) ([]json.RawMessage, error) {
		out := make([]json.RawMessage, len(msgs))
		for i, m := range msgs {
			var v map[string]any
			json.Unmarshal(m, &v)
			delete(v, "big")
			out[i], _ = json.Marshal(v)
		}
		return out, nil
	}
	if _, _, err := st.Rewrite("r1", shrink); !errors.Is(err, ErrLocked) {
		t.Fatalf("rewrite of an open session: %v", err)
	}
	s.Close()
	f, _ := os.Open(filepath.Join(st.Dir(), "r1.jsonl"))
	recs, _, _, _ := readRecords(f)
	f.Close()

	before, after, err := st.Rewrite("r1", shrink)
	if err != nil || after >= before || before < 10000 {
		t.Fatalf("rewrite: %d -> %d, %v", before, after, err)
	}
	f, _ = os.Open(filepath.Join(st.Dir(), "r1.jsonl"))
	got, _, _, _ := readRecords(f)
	f.Close()
	if len(got) != 2 || string(got[0].Message) != `{"n":1}` || !got[0].Time.Equal(recs[0].Time) || !got[1].Time.Equal(recs[1].Time) {
		t.Fatalf("rewritten records: %+v", got)
	}
	if entries, _ := os.ReadDir(st.Dir()); len(entries) != 1 {
		t.Errorf("files left beside the session: %d", len(entries))
	}
	s, msgs, _, err := st.Open("r1")
	if err != nil || len(msgs) != 2 {
		t.Fatalf("open after rewrite: %v, %d messages", err, len(msgs))
	}
	s.Append(json.RawMessage(`{"n":3}`))
	s.Close()
	if msgs, _, _ := st.Messages("r1"); len(msgs) != 3 {
		t.Errorf("%d messages after an append to the rewritten session", len(msgs))
	}
	if _, _, err := st.Rewrite("nope", shrink); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown session: %v", err)
	}
	if _, _, err := st.Rewrite("../x", shrink); !errors.Is(err, ErrBadID) {
		t.Errorf("bad id: %v", err)
	}
	// A failing fn leaves the file as it was.
	if _, _, err := st.Rewrite("r1", func([]json.RawMessage) ([]json.RawMessage, error) { return nil, errors.New("no") }); err == nil {
		t.Error("fn's error was lost")
	}
	if msgs, _, _ := st.Messages("r1"); len(msgs) != 3 {
		t.Errorf("a failed rewrite changed the session")
	}
}

// TestRewriteRefusesDamaged: a session with a line the reader drops is
// not rewritten (that would lose the line for good).
func TestRewriteRefusesDamaged(t *testing.T) {
	st, err := OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := st.Open("d1")
	if err != nil {
		t.Fatal(err)
	}
	s.Record(map[string]string{"role": "user", "content": "hi"})
	s.Close()
	path := filepath.Join(st.Dir(), "d1.jsonl")
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("not a record\n")
	f.Close()
	before, _ := os.ReadFile(path)
	keep := func(m []json.RawMessage) ([]json.RawMessage, error) { return m, nil }
	if _, _, err := st.Rewrite("d1", keep); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("the damaged session was changed")
	}
}

// TestRewriteKeepsRecordsOfAnyTime: a request record dated ahead of the
// clock (a clock stepped back, a copied session) survives a rewrite.
func TestRewriteKeepsRecordsOfAnyTime(t *testing.T) {
	st, err := OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := st.Open("f1")
	if err != nil {
		t.Fatal(err)
	}
	s.Record(map[string]string{"role": "user", "content": "hi"})
	s.Close()
	line, _ := json.Marshal(Record{Time: time.Now().Add(48 * time.Hour), Request: json.RawMessage(`{"model":"m"}`)})
	f, _ := os.OpenFile(filepath.Join(st.Dir(), "f1.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.Write(append(line, '\n'))
	f.Close()
	if _, _, err := st.Rewrite("f1", func(m []json.RawMessage) ([]json.RawMessage, error) { return m, nil }); err != nil {
		t.Fatal(err)
	}
	recs, _, err := st.Records("f1")
	if err != nil || len(recs) != 2 || len(recs[1].Request) == 0 {
		t.Fatalf("records after the rewrite: %+v %v", recs, err)
	}
}
