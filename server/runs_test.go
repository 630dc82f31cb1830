package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testprovider"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/session"
)

// askWordCount is a reply asking for word_count, its arguments in two
// fragments, after a pause.
func askWordCount(pause time.Duration) chattest.Reply {
	return chattest.Reply{Delay: pause, Chunks: []string{
		chattest.Chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"word_count","arguments":""}}]}`, ""),
		chattest.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"text\":\"one "}}]}`, ""),
		chattest.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"two three\"}"}}]}`, ""),
		chattest.FinishChunk("tool_calls"),
	}}
}

// answer is a streamed text reply, one delta per part, after a pause.
func answer(pause time.Duration, parts ...string) chattest.Reply {
	var cs []string
	for _, p := range parts {
		cs = append(cs, chattest.TextChunk(p))
	}
	return chattest.Reply{Delay: pause, Chunks: append(cs, chattest.FinishChunk("stop"))}
}

// bodies returns the bodies of the requests srv received.
func bodies(srv *chattest.Server) []string {
	var out []string
	for _, r := range srv.Requests() {
		out = append(out, string(r.Raw))
	}
	return out
}

// sseEvent is one event of a run's stream.
type sseEvent struct {
	name string
	data map[string]any
	raw  string
}

// postRun starts a run and reads its whole event stream.
func (ts *testServer) postRun(t *testing.T, body string) (int, []sseEvent, string) {
	t.Helper()
	return ts.postRunWith(t, body, nil)
}

// postRunWith is postRun with more request headers.
func (ts *testServer) postRunWith(t *testing.T, body string, header http.Header) (int, []sseEvent, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.url+"/v1/runs", strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if ts.token != "" {
		req.Header.Set("Authorization", "Bearer "+ts.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, string(b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var evs []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				evs = append(evs, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.raw = strings.TrimPrefix(line, "data: ")
			if err := json.Unmarshal([]byte(cur.raw), &cur.data); err != nil {
				t.Errorf("event data is not JSON: %q", line)
			}
		default:
			t.Errorf("unexpected line in the stream: %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream (cut by a write timeout?): %v", err)
	}
	return resp.StatusCode, evs, ""
}

func eventNames(evs []sseEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.name)
		if e.data["type"] != e.name {
			out = append(out, "MISMATCH:"+fmt.Sprint(e.data["type"]))
		}
	}
	return out
}

func TestRunStreamsEvents(t *testing.T) {
	// Both model replies come later than the server's write timeout: the
	// stream must survive by extending its deadline per event.
	chat := chattest.New(t,
		askWordCount(1500*time.Millisecond),
		answer(1500*time.Millisecond, "There are ", "3 words."),
		answer(0, "Still 3."),
	)
	lc := &loop.Config{Provider: testprovider.Chat(t, chat.URL), Limits: loop.Limits{MaxRetries: -1}}
	ts := startServer(t, setup{opts: server.Options{Loop: lc, WriteTimeout: time.Second}})
	ts.mustUpload(exampleTool(t, "word_count"), "", http.StatusCreated)

	status, evs, body := ts.postRun(t, `{"prompt":"How many words in 'one two three'?","session":"s-1"}`)
	if status != http.StatusOK {
		t.Fatalf("run: %d %s", status, body)
	}
	want := []string{"started", "turn_complete", "tool_started", "tool_completed", "text_delta", "text_delta", "turn_complete", "done"}
	if got := eventNames(evs); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", got, want)
	}
	if evs[0].data["session"] != "s-1" {
		t.Errorf("started: %s", evs[0].raw)
	}
	if evs[2].data["name"] != "word_count" || !strings.Contains(evs[2].raw, `"input":{"text":"one two three"}`) {
		t.Errorf("tool_started: %s", evs[2].raw)
	}
	if evs[3].data["is_error"] != false || !strings.Contains(evs[3].raw, `"words":3`) {
		t.Errorf("tool_completed: %s", evs[3].raw)
	}
	if evs[7].data["text"] != "There are 3 words." || evs[7].data["session"] != "s-1" {
		t.Errorf("done: %s", evs[7].raw)
	}
	// The model got the tool's result.
	reqs := bodies(chat)
	if len(reqs) != 2 || !strings.Contains(reqs[1], `"role":"tool"`) || !strings.Contains(reqs[1], `\"words\":3`) {
		t.Errorf("second model request: %v", reqs)
	}

	// The session is stored, and a second run continues it.
	r := ts.request("GET", "/v1/sessions/s-1", "", nil)
	var sess struct {
		ID       string
		Messages []loop.Message
	}
	r.json(t, &sess)
	if r.status != http.StatusOK || sess.ID != "s-1" || len(sess.Messages) != 4 || sess.Messages[2].Role != loop.RoleTool {
		t.Fatalf("session: %d %s", r.status, r.body)
	}
	status, evs, body = ts.postRun(t, `{"prompt":"And now?","session":"s-1"}`)
	if status != http.StatusOK || evs[len(evs)-1].data["text"] != "Still 3." {
		t.Fatalf("second run: %d %v %s", status, eventNames(evs), body)
	}
	if reqs := bodies(chat); !strings.Contains(reqs[2], "How many words") || !strings.Contains(reqs[2], "And now?") {
		t.Errorf("the second run did not send the history: %s", reqs[2])
	}
	ts.request("GET", "/v1/sessions/s-1", "", nil).json(t, &sess)
	if len(sess.Messages) != 6 {
		t.Errorf("session after two runs: %d messages", len(sess.Messages))
	}
}

func TestRunFailures(t *testing.T) {
	chat := chattest.New(t, chattest.Reply{
		Status: http.StatusUnauthorized,
		Body:   `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`,
	})
	lc := &loop.Config{Provider: testprovider.Chat(t, chat.URL), Limits: loop.Limits{MaxRetries: -1}}
	dir := t.TempDir()
	ts := startServer(t, setup{dataDir: dir, opts: server.Options{Loop: lc}})

	// A provider error ends the stream with an error event.
	status, evs, body := ts.postRun(t, `{"prompt":"hi"}`)
	if status != http.StatusOK || len(evs) != 2 || evs[1].name != "error" || evs[1].data["kind"] != string(loop.KindProvider) || !strings.Contains(evs[1].raw, "Incorrect API key") {
		t.Fatalf("provider error: %d %v %s", status, evs, body)
	}
	id, _ := evs[0].data["session"].(string)
	if !session.ValidID(id) {
		t.Errorf("fresh session id %q", id)
	}

	bad := []struct {
		body   string
		status int
		kind   server.Kind
	}{
		{`{}`, 400, server.KindBadRequest},
		{`{"prompt":"  "}`, 400, server.KindBadRequest},
		{`{"prompt":"hi","extra":1}`, 400, server.KindBadRequest},
		{`not json`, 400, server.KindBadRequest},
		{`{"prompt":"hi","session":"../../etc/passwd"}`, 400, server.KindBadRequest},
	}
	for _, c := range bad {
		r := ts.request("POST", "/v1/runs", "application/json", []byte(c.body))
		if r.status != c.status || r.errorKind(t) != c.kind {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
		}
	}

	// A session in use is refused.
	st, err := session.OpenFiles(filepath.Join(dir, "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	held, _, _, err := st.Open("busy")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	r := ts.request("POST", "/v1/runs", "application/json", []byte(`{"prompt":"hi","session":"busy"}`))
	if r.status != http.StatusConflict || r.errorKind(t) != server.KindSessionLocked {
		t.Errorf("locked session: %d %s", r.status, r.body)
	}

	if r := ts.request("GET", "/v1/sessions/nope", "", nil); r.status != http.StatusNotFound || r.errorKind(t) != "not_found" {
		t.Errorf("unknown session: %d %s", r.status, r.body)
	}
	if r := ts.request("GET", "/v1/sessions/.hidden", "", nil); r.status != http.StatusBadRequest {
		t.Errorf("bad session id: %d %s", r.status, r.body)
	}
	if len(bodies(chat)) != 1 {
		t.Errorf("the refused runs reached the model: %d requests", len(bodies(chat)))
	}
}

func TestRunWithoutLoopIsUnavailable(t *testing.T) {
	ts := startServer(t, setup{})
	r := ts.request("POST", "/v1/runs", "application/json", []byte(`{"prompt":"hi"}`))
	if r.status != http.StatusServiceUnavailable || r.errorKind(t) != server.KindUnavailable {
		t.Errorf("run without a loop: %d %s", r.status, r.body)
	}
}
