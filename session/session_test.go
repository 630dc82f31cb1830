package session

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAppendReopenAndList(t *testing.T) {
	st, err := OpenFiles(filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	s, hist, warn, err := st.Open("abc")
	if err != nil || len(hist) != 0 || len(warn) != 0 {
		t.Fatalf("Open new = %v %v %v", hist, warn, err)
	}
	msgs := []string{`{"role":"user","content":"first prompt"}`, `{"role":"assistant","content":"hi"}`, `{"role":"user","content":"again"}`, `{"role":"assistant","content":"ok"}`}
	for _, m := range msgs {
		if err := s.Append(json.RawMessage(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append(json.RawMessage(`{not json`)); err == nil {
		t.Fatal("Append accepted invalid JSON")
	}
	s.Close()
	fi, err := os.Stat(filepath.Join(st.Dir(), "abc.jsonl"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode = %v, %v", fi.Mode(), err)
	}
	s, hist, _, err = st.Open("abc")
	if err != nil || len(hist) != 4 || string(hist[2]) != msgs[2] {
		t.Fatalf("reopen = %s, %v", hist, err)
	}
	s.Close()
	infos, err := st.Infos()
	if err != nil || len(infos) != 1 || infos[0].FirstPrompt != "first prompt" || infos[0].Turns != 2 || infos[0].Messages != 4 {
		t.Fatalf("List = %+v, %v", infos, err)
	}
}

func TestTornLastLineIsDroppedAndRepaired(t *testing.T) {
	st, _ := OpenFiles(t.TempDir())
	s, _, _, err := st.Open("torn")
	if err != nil {
		t.Fatal(err)
	}
	s.Append(json.RawMessage(`{"role":"user","content":"a"}`))
	s.Append(json.RawMessage(`{"role":"assistant","content":"b"}`))
	s.Close()
	// Simulate a process killed in the middle of writing a line.
	f, _ := os.OpenFile(filepath.Join(st.Dir(), "torn.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","message":{"role":"tool","con`)
	f.Close()

	hist, warn, err := st.Messages("torn")
	if err != nil || len(hist) != 2 || len(warn) != 1 || !strings.Contains(warn[0], "torn last line") {
		t.Fatalf("Load = %s, %v, %v", hist, warn, err)
	}
	s, hist, warn, err = st.Open("torn")
	if err != nil || len(hist) != 2 || len(warn) != 1 {
		t.Fatalf("Open = %s, %v, %v", hist, warn, err)
	}
	if err := s.Append(json.RawMessage(`{"role":"user","content":"c"}`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	hist, warn, err = st.Messages("torn")
	if err != nil || len(hist) != 3 || len(warn) != 0 || string(hist[2]) != `{"role":"user","content":"c"}` {
		t.Fatalf("after repair = %s, %v, %v", hist, warn, err)
	}
}

func TestLocked(t *testing.T) {
	st, _ := OpenFiles(t.TempDir())
	s, _, _, err := st.Open("busy")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := st.Open("busy"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	// Reading is allowed while locked.
	if _, _, err := st.Messages("busy"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, _, _, err = st.Open("busy")
	if err != nil {
		t.Fatalf("Open after Close = %v", err)
	}
	s.Close()
}

func TestBadIDs(t *testing.T) {
	st, _ := OpenFiles(t.TempDir())
	for _, id := range []string{"", "../x", "a/b", ".hidden", "-flag", strings.Repeat("x", 65), "a b"} {
		if _, _, _, err := st.Open(id); !errors.Is(err, ErrBadID) {
			t.Errorf("Open(%q) = %v", id, err)
		}
	}
	if _, _, err := st.Messages("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load unknown = %v", err)
	}
	if id := NewID(); !ValidID(id) {
		t.Errorf("NewID %q invalid", id)
	}
}
