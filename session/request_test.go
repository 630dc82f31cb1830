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

// requestInfo has the shape of loop.RequestInfo that Info reads.
type requestInfo struct {
	Model string `json:"model"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
	DurationMS   int64  `json:"duration_ms"`
	Retries      int    `json:"retries"`
	FinishReason string `json:"finish_reason"`
}

func req(model string, total int64) requestInfo {
	r := requestInfo{Model: model, FinishReason: "stop", DurationMS: 12}
	r.Usage.TotalTokens = total
	return r
}

// Request records are kept beside the messages: history readers skip
// them, Info sums them, Records returns everything in order.
func TestRequestRecords(t *testing.T) {
	st, err := OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := st.Open("r")
	if err != nil {
		t.Fatal(err)
	}
	s.Record(msg{"user", "first"})
	s.RecordRequest(req("model-a", 100))
	s.Record(msg{"assistant", "one"})
	s.Record(msg{"user", "second"})
	s.RecordRequest(req("model-b", 23))
	s.RecordRequest(json.RawMessage(`{"model":7,"usage":"lots"}`)) // not the shape: ignored by Info
	s.Record(msg{"assistant", "two"})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.RecordRequest(func() {})
	if s.Err() == nil {
		t.Fatal("RecordRequest of a value that is not JSON left no error")
	}
	s.Close()

	s, hist, warnings, err := st.Open("r")
	if err != nil || len(warnings) != 0 {
		t.Fatal(err, warnings)
	}
	s.Close()
	got, err := Decode[msg](hist)
	if err != nil || len(got) != 4 || got[0].Content != "first" || got[3].Content != "two" {
		t.Fatalf("Open history = %+v, %v; want the 4 messages only", got, err)
	}
	msgs, _, err := st.Messages("r")
	if err != nil || len(msgs) != 4 {
		t.Fatalf("Load = %d messages, %v", len(msgs), err)
	}
	info, err := st.Info("r")
	if err != nil {
		t.Fatal(err)
	}
	if info.Turns != 2 || info.Messages != 4 || info.Model != "model-b" || info.Tokens != 123 || info.FirstPrompt != "first" {
		t.Fatalf("Info = %+v; want 2 turns (user prompts), 4 messages, model-b, 123 tokens", info)
	}
	recs, _, err := st.Records("r")
	if err != nil || len(recs) != 7 {
		t.Fatalf("Records = %d, %v; want 7", len(recs), err)
	}
	if len(recs[1].Request) == 0 || len(recs[1].Message) != 0 || !strings.Contains(string(recs[1].Request), `"total_tokens":100`) || recs[1].Time.IsZero() {
		t.Fatalf("record 2 = %+v; want the first request", recs[1])
	}
	// The line on disk has exactly the documented shape.
	b, _ := os.ReadFile(filepath.Join(st.Dir(), "r.jsonl"))
	line := strings.Split(string(b), "\n")[1]
	if !strings.HasPrefix(line, `{"time":"`) || !strings.Contains(line, `","request":{"model":"model-a","usage":{`) || strings.Contains(line, `"message"`) {
		t.Fatalf("request line: %s", line)
	}
	if _, _, err := st.Records("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Records of an unknown id: %v", err)
	}
	if _, err := st.Info("../r"); !errors.Is(err, ErrBadID) {
		t.Fatalf("Info of a bad id: %v", err)
	}
}

// Remove refuses a session in use, an unknown id and an id that is a
// path; Session.Remove drops an open session's file and the id can be
// used again.
func TestRemove(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenFiles(filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(dir, "outside.jsonl")
	os.WriteFile(outside, []byte("{}\n"), 0o600)
	s, _, _, err := st.Open("busy")
	if err != nil {
		t.Fatal(err)
	}
	s.Record(msg{"user", "hi"})
	if err := st.Remove("busy"); !errors.Is(err, ErrLocked) {
		t.Fatalf("Remove of a session in use = %v, want ErrLocked", err)
	}
	if _, err := os.Stat(filepath.Join(st.Dir(), "busy.jsonl")); err != nil {
		t.Fatalf("the session in use was removed: %v", err)
	}
	s.Close()
	if err := st.Remove("busy"); err != nil {
		t.Fatal(err)
	}
	if err := st.Remove("busy"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Remove = %v, want ErrNotFound", err)
	}
	for _, id := range []string{"../outside", "..", "a/b", ""} {
		if err := st.Remove(id); !errors.Is(err, ErrBadID) {
			t.Errorf("Remove(%q) = %v, want ErrBadID", id, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatal("a file outside the store was removed")
	}

	s, _, _, err = st.Open("orphan")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if infos, _ := st.Infos(); len(infos) != 0 {
		t.Fatalf("List after Session.Remove = %+v", infos)
	}
	s, hist, _, err := st.Open("orphan")
	if err != nil || len(hist) != 0 {
		t.Fatal(hist, err)
	}
	s.Close()
}

// TestRemoveUnusedSince: the decision is made under the lock on the
// file's own time: a session used after the cutoff is kept.
func TestRemoveUnusedSince(t *testing.T) {
	st, err := OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := st.Open("old")
	if err != nil {
		t.Fatal(err)
	}
	s.Record(map[string]string{"role": "user", "content": "hi"})
	s.Close()
	cutoff := time.Now().Add(-time.Hour)
	if ok, err := st.RemoveUnusedSince("old", cutoff); err != nil || ok {
		t.Fatalf("a session used just now was removed: %v %v", ok, err)
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(st.Dir(), "old.jsonl"), past, past); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.RemoveUnusedSince("old", cutoff); err != nil || !ok {
		t.Fatalf("an unused session was kept: %v %v", ok, err)
	}
	if _, err := st.RemoveUnusedSince("old", cutoff); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err %v", err)
	}
}
