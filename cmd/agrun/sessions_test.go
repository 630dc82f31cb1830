package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/session"
)

// addRequest appends a request record to session id, as the loop's
// callback will.
func (e *testEnv) addRequest(id, model string, total int64) {
	e.t.Helper()
	st, err := session.OpenFiles(filepath.Join(e.dir, "sessions"))
	if err != nil {
		e.t.Fatal(err)
	}
	s, _, _, err := st.Open(id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	s.RecordRequest(json.RawMessage(`{"model":"` + model + `","usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":` + jsonInt(total) + `},"duration_ms":5,"retries":0,"finish_reason":"stop"}`))
	if err := s.Err(); err != nil {
		e.t.Fatal(err)
	}
}

// countCalls counts the call records among recs.
func countCalls(recs []session.Record) int {
	n := 0
	for _, r := range recs {
		if len(r.Call) != 0 {
			n++
		}
	}
	return n
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestSessionsListShowExport: the list has last use, turns (user
// prompts), model and tokens; show is readable or raw records; export
// writes Markdown or JSON.
func TestSessionsListShowExport(t *testing.T) {
	t.Parallel()
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"a b"}`}}},
		chattest.Reply{Text: "Two words, with ``` fences."},
		chattest.Reply{Text: "Bye."},
	)
	e := newTestEnv(t, srv.URL, "")
	e.run("", "run", "--session", "s1", "count a b").wantCode(t, exitOK)
	e.run("", "run", "--session", "s1", "thanks").wantCode(t, exitOK)
	var before []session.Info // the runs' own request records count too
	json.Unmarshal([]byte(e.run("", "sessions", "--json").wantCode(t, exitOK).stdout), &before)
	base := before[0].Tokens
	e.addRequest("s1", "model-x", 100)
	e.addRequest("s1", "model-y", 23)

	r := e.run("", "sessions").wantCode(t, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "LAST USED") || !strings.Contains(lines[0], "MODEL") || !strings.Contains(lines[0], "TOKENS") {
		t.Fatalf("list:\n%s", r.stdout)
	}
	if f := strings.Fields(lines[1]); f[0] != "s1" || f[3] != "2" || f[4] != "model-y" || f[5] != fmt.Sprint(base+123) || !strings.Contains(lines[1], "count a b") {
		t.Fatalf("list row: %q", lines[1])
	}
	r = e.run("", "sessions", "--json").wantCode(t, exitOK)
	var infos []session.Info
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != 1 || infos[0].Turns != 2 || infos[0].Model != "model-y" || infos[0].Tokens != base+123 {
		t.Fatalf("list --json: %s", r.stdout)
	}

	r = e.run("", "sessions", "show", "s1").wantCode(t, exitOK)
	for _, want := range []string{fmt.Sprintf("# session s1: 2 turns, model model-y, %d tokens", base+123), "user: count a b", "assistant: -> word_count", "[tool word_count call_1]", "assistant: Bye."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, args := range [][]string{{"sessions", "show", "--json", "s1"}, {"sessions", "--json", "show", "s1"}} {
		r = e.run("", args...).wantCode(t, exitOK)
		var recs []session.Record
		// 6 messages, the 3 runs' request records, the word_count call's
		// record, the 2 added ones.
		if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 12 || len(recs[11].Request) == 0 || len(recs[0].Message) == 0 || countCalls(recs) != 1 {
			t.Fatalf("%v: %d records, %v\n%s", args, len(recs), err, r.stdout)
		}
	}

	r = e.run("", "sessions", "export", "s1").wantCode(t, exitOK)
	for _, want := range []string{"# Session s1\n", fmt.Sprintf("- model: model-y\n- tokens: %d\n", base+123), "\n## User\n\ncount a b\n", "\nCalls `word_count` (call_1):\n\n```json\n{\"text\":\"a b\"}\n```\n", "## Tool `word_count` (call_1)", "\n## Assistant\n\nBye.\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("markdown lacks %q:\n%s", want, r.stdout)
		}
	}
	r = e.run("", "sessions", "export", "--format", "json", "s1").wantCode(t, exitOK)
	var doc struct {
		ID      string `json:"id"`
		Tokens  int64  `json:"tokens"`
		History []struct {
			Role, Content string
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.ID != "s1" || doc.Tokens != base+123 || len(doc.History) != 6 || doc.History[5].Content != "Bye." {
		t.Fatalf("export json: %v\n%s", err, r.stdout)
	}
	e.run("", "sessions", "export", "--format", "xml", "s1").wantCode(t, exitUsage)
	e.run("", "sessions", "export", "nope").wantCode(t, exitFailure)
	e.run("", "sessions", "show", "../s1").wantCode(t, exitUsage)
	e.run("", "sessions", "show").wantCode(t, exitUsage)
}

// fakeSession writes session id with one exchange, last used at when.
func (e *testEnv) fakeSession(id string, when time.Time) string {
	e.t.Helper()
	p := filepath.Join(e.dir, "sessions", id+".jsonl")
	line := `{"time":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hi ` + id + `"}}` + "\n"
	if err := os.WriteFile(p, []byte(line), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Chtimes(p, when, when); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// TestSessionsRmAndPrune: rm removes what it is given and refuses a
// session in use; prune removes what was last used before the age, says
// what, and skips sessions in use.
func TestSessionsRmAndPrune(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	now := time.Now()
	e.fakeSession("a", now)
	e.fakeSession("b", now)
	old1 := e.fakeSession("old1", now.Add(-40*24*time.Hour))
	e.fakeSession("old2", now.Add(-31*24*time.Hour))
	oldBusy := e.fakeSession("oldbusy", now.Add(-60*24*time.Hour))
	e.fakeSession("recent", now.Add(-29*24*time.Hour))
	outside := filepath.Join(e.dir, "keep.jsonl")
	os.WriteFile(outside, []byte("x"), 0o600)

	st, _ := session.OpenFiles(filepath.Join(e.dir, "sessions"))
	busy, _, _, err := st.Open("oldbusy")
	if err != nil {
		t.Fatal(err)
	}
	os.Chtimes(oldBusy, now.Add(-60*24*time.Hour), now.Add(-60*24*time.Hour))

	r := e.run("", "sessions", "rm", "a", "b").wantCode(t, exitOK)
	if r.stdout != "removed a\nremoved b\n" {
		t.Fatalf("rm: %+v", r)
	}
	r = e.run("", "sessions", "rm", "oldbusy", "nope").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "session oldbusy is in use by another agrun process: not removed") || !strings.Contains(r.stderr, "session nope not found") {
		t.Fatalf("rm busy: %s", r.stderr)
	}
	e.run("", "sessions", "rm", "../keep").wantCode(t, exitUsage)
	e.run("", "sessions", "rm").wantCode(t, exitUsage)
	if _, err := os.Stat(outside); err != nil {
		t.Fatal("rm reached outside the sessions folder")
	}

	for _, args := range [][]string{{"prune"}, {"prune", "--older-than", "30x"}, {"prune", "--older-than", "0d"}, {"prune", "--older-than", "-5h"}, {"prune", "extra", "--older-than", "1d"}} {
		e.run("", append([]string{"sessions"}, args...)...).wantCode(t, exitUsage)
	}
	r = e.run("", "sessions", "prune", "--older-than", "30d").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "removed old1 (last used ") || !strings.Contains(r.stdout, "removed old2 (") || strings.Count(r.stdout, "removed") != 2 {
		t.Fatalf("prune stdout: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "oldbusy is in use") || !strings.Contains(r.stderr, "2 sessions removed, 1 kept (used within 30d), 1 in use skipped") {
		t.Fatalf("prune stderr: %s", r.stderr)
	}
	if _, err := os.Stat(old1); !os.IsNotExist(err) {
		t.Fatal("old1 is still there")
	}
	busy.Close()
	r = e.run("", "sessions", "prune", "--older-than", "720h").wantCode(t, exitOK)
	if r.stdout == "" || !strings.Contains(r.stdout, "removed oldbusy") {
		t.Fatalf("prune after release: %+v", r)
	}
	r = e.run("", "sessions", "--json").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"id":"recent"`) || strings.Count(r.stdout, `"id"`) != 1 {
		t.Fatalf("left: %s", r.stdout)
	}
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{{"30d", 30 * 24 * time.Hour}, {"12h", 12 * time.Hour}, {"90m", 90 * time.Minute}, {"1h30m", 90 * time.Minute}} {
		if got, err := config.ParseAge(tc.in); err != nil || got != tc.want {
			t.Errorf("config.ParseAge(%q) = %v, %v", tc.in, got, err)
		}
	}
}
