package session

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func TestRecordAndDecode(t *testing.T) {
	st, err := OpenFiles(filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := st.Open("rec")
	if err != nil {
		t.Fatal(err)
	}
	s.Record(msg{"user", "hi"})
	s.Record(func() {}) // not JSON: kept as the session's error
	s.Record(msg{"assistant", "hello"})
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "the session could not be saved") {
		t.Errorf("Err = %v, want the failure of the second Record", err)
	}
	s.Close()

	raw, _, err := st.Messages("rec")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode[msg](raw)
	if err != nil || len(got) != 2 || got[0] != (msg{"user", "hi"}) || got[1] != (msg{"assistant", "hello"}) {
		t.Fatalf("Decode = %+v, %v; want the two messages that were recorded", got, err)
	}
	_, err = Decode[msg]([]json.RawMessage{json.RawMessage(`{"role":"user"}`), json.RawMessage(`{"role":1}`)})
	var me *MessageError
	if !errors.As(err, &me) || me.Index != 2 || !strings.HasPrefix(err.Error(), "message 2: ") {
		t.Errorf("Decode of a bad second message = %v, want a *MessageError for message 2", err)
	}
}
