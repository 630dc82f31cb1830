package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeLines writes a session file of raw lines.
func writeLines(t *testing.T, st *Files, id string, lines ...[]byte) {
	t.Helper()
	if err := os.WriteFile(st.path(id), bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

func recordLine(t *testing.T, msg string) []byte {
	t.Helper()
	b, err := json.Marshal(record{Time: time.Unix(1, 0).UTC(), Message: json.RawMessage(msg)})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func lowerMaxLine(t *testing.T, n int) {
	old := maxLine
	maxLine = n
	t.Cleanup(func() { maxLine = old })
}

// A line over the limit (a tool message written before tool messages were
// capped) does not make the session unreadable: the line is kept with its
// long strings cut, the lines after it are read, and the session opens and
// takes new messages.
func TestLongLineIsCutNotFatal(t *testing.T) {
	lowerMaxLine(t, 1<<20)
	st, err := OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat(`ab\"\u00e9`, 1<<18) // 2.5 MiB as written, escapes included
	before := `{"role":"user","content":"go"}`
	tool := `{"role":"tool","content":"` + huge + `","tool_call_id":"c1","name":"t"}`
	after := `{"role":"assistant","content":"done"}`
	writeLines(t, st, "s", recordLine(t, before), recordLine(t, tool), []byte("{not json\n"), recordLine(t, after))

	s, hist, warnings, err := st.Open("s")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if len(hist) != 3 || string(hist[0]) != before || string(hist[2]) != after {
		t.Fatalf("history: %d messages", len(hist))
	}
	var tm map[string]string
	if err := json.Unmarshal(hist[1], &tm); err != nil {
		t.Fatalf("cut message is not JSON: %v", err)
	}
	if tm["role"] != "tool" || tm["tool_call_id"] != "c1" || tm["name"] != "t" {
		t.Errorf("cut message lost its other fields: %v", tm["tool_call_id"])
	}
	if c := tm["content"]; !strings.HasPrefix(c, `ab"é`) || !strings.HasSuffix(c, "…") || len(c) > maxString {
		t.Errorf("content: %d bytes", len(c))
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "line 2") || !strings.Contains(warnings[0], "cut") || !strings.Contains(warnings[1], "line 3: unreadable") {
		t.Errorf("warnings %q", warnings)
	}
	if err := s.Append(json.RawMessage(`{"role":"user","content":"more"}`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, hist, _, err = st.Open("s")
	if err != nil || len(hist) != 4 {
		t.Fatalf("reopen: %d messages, %v", len(hist), err)
	}
	s.Close()
	info, err := st.Info("s")
	if err != nil || info.Messages != 4 || info.Turns != 2 || info.FirstPrompt != "go" {
		t.Errorf("Info = %+v, %v", info, err)
	}
	msgs, _, err := st.Messages("s")
	if err != nil || len(msgs) != 4 {
		t.Errorf("Load: %d, %v", len(msgs), err)
	}
}

// A line over the limit that even cut is too long (its size is not in
// long strings) is dropped with a warning; the rest loads.
func TestLongLineWithoutLongStringsIsDropped(t *testing.T) {
	lowerMaxLine(t, 1<<20)
	st, _ := OpenFiles(t.TempDir())
	numbers := `{"role":"tool","content":"x","n":[` + strings.Repeat("1,", 1<<20) + `1]}`
	writeLines(t, st, "s", recordLine(t, numbers), recordLine(t, `{"role":"user","content":"kept"}`))
	msgs, warnings, err := st.Messages("s")
	if err != nil || len(msgs) != 1 || string(msgs[0]) != `{"role":"user","content":"kept"}` {
		t.Fatalf("Load = %d messages, %v", len(msgs), err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "line 1") || !strings.Contains(warnings[0], "dropped") {
		t.Errorf("warnings %q", warnings)
	}
}

// The writer never writes a line the reader would have to cut: a message
// over the limit is cut the same way when its size is in strings, and
// refused otherwise, leaving the file readable and appendable.
func TestAppendBoundsLines(t *testing.T) {
	lowerMaxLine(t, 1<<20)
	st, _ := OpenFiles(t.TempDir())
	s, _, _, err := st.Open("s")
	if err != nil {
		t.Fatal(err)
	}
	big := fmt.Sprintf(`{"role":"tool","content":%q,"tool_call_id":"c1"}`, strings.Repeat("z", 2<<20))
	if err := s.Append(json.RawMessage(big)); err != nil {
		t.Fatalf("Append of a long string: %v", err)
	}
	numbers := `{"role":"tool","n":[` + strings.Repeat("1,", 1<<20) + `1]}`
	if err := s.Append(json.RawMessage(numbers)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append of a huge array: %v, want ErrTooLarge", err)
	}
	if err := s.Append(json.RawMessage(`{"role":"user","content":"next"}`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, _ := os.ReadFile(filepath.Join(st.Dir(), "s.jsonl"))
	for i, l := range bytes.SplitAfter(b, []byte("\n")) {
		if len(l) > maxLine {
			t.Errorf("line %d is %d bytes", i+1, len(l))
		}
	}
	msgs, warnings, err := st.Messages("s")
	if err != nil || len(msgs) != 2 || len(warnings) != 0 {
		t.Fatalf("Load = %d messages, %q, %v", len(msgs), warnings, err)
	}
	var m map[string]string
	if json.Unmarshal(msgs[0], &m) != nil || m["tool_call_id"] != "c1" || !strings.HasSuffix(m["content"], "…") {
		t.Errorf("cut message: %v", m["tool_call_id"])
	}
}

// The shrinker cuts at escape and rune boundaries only, so whatever the
// string holds its output stays valid JSON.
func FuzzShrink(f *testing.F) {
	f.Add("plain", 3)
	f.Add(`a\u00e9\\\"b`, 2)
	f.Add("日本語\\n", 4)
	f.Fuzz(func(t *testing.T, s string, cut int) {
		b, err := json.Marshal(map[string]any{"k": s, "a": []string{s, s}})
		if err != nil {
			return
		}
		old := maxString
		maxString = 1 + (cut&0xff)%16
		defer func() { maxString = old }()
		sh := &shrinker{}
		sh.feed(b)
		if !json.Valid(sh.out) {
			t.Fatalf("shrink(%s) = %s: invalid JSON", b, sh.out)
		}
	})
}
