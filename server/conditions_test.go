package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testprovider"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/server"
)

// A run whose stream breaks off is retried (a retry event, the reply
// starts over), reasoning arrives as reasoning_delta events when the run
// asks for it (show_reasoning), and a length-cut answer ends with "truncated" and the run's usage in done.
func TestRunRealConditions(t *testing.T) {
	chat := chattest.New(t,
		chattest.Reply{Text: "Half a sent", Cut: true},
		chattest.Reply{Reasoning: "Let me think.", Text: "The answer is cut", Finish: "length"},
		chattest.Reply{Reasoning: "Hidden.", Text: "ok"},
	)
	lc := &loop.Config{Provider: testprovider.Chat(t, chat.URL)}
	ts := startServer(t, setup{opts: server.Options{Loop: lc}})
	status, evs, body := ts.postRun(t, `{"prompt":"q","session":"rc-1","show_reasoning":true}`)
	if status != http.StatusOK {
		t.Fatalf("run: %d %s", status, body)
	}
	names := strings.Join(eventNames(evs), " ")
	if !strings.Contains(names, "text_delta retry reasoning_delta") || !strings.HasSuffix(names, "turn_complete done") {
		t.Fatalf("events %s", names)
	}
	done := evs[len(evs)-1]
	if done.data["text"] != "The answer is cut" || done.data["truncated"] != true || !strings.Contains(done.raw, `"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`) {
		t.Errorf("done %s", done.raw)
	}
	// Not asked for: no reasoning on the stream.
	_, evs, _ = ts.postRun(t, `{"prompt":"q","session":"rc-2"}`)
	if names := strings.Join(eventNames(evs), " "); strings.Contains(names, "reasoning_delta") {
		t.Errorf("events %s", names)
	}
}

// A failed run's error event names its session; a budget ends it with
// its own kind.
func TestRunErrorCarriesSession(t *testing.T) {
	calls := chattest.Reply{ToolCalls: []chattest.Call{{ID: "a", Name: "nope", Args: `{}`}, {ID: "b", Name: "nope", Args: `{"x":1}`}}}
	chat := chattest.New(t,
		chattest.Reply{Status: 429, Body: `{"error":{"message":"slow down"}}`, Header: map[string]string{"Retry-After": "120"}},
		calls,
	)
	lc := &loop.Config{Provider: testprovider.Chat(t, chat.URL), Limits: loop.Limits{MaxToolCalls: 1}}
	ts := startServer(t, setup{opts: server.Options{Loop: lc}})
	_, evs, _ := ts.postRun(t, `{"prompt":"q","session":"rc-2"}`)
	last := evs[len(evs)-1]
	if last.name != "error" || last.data["session"] != "rc-2" || last.data["kind"] != string(loop.KindProvider) || !strings.Contains(last.raw, "max_retry_wait") {
		t.Errorf("error %s", last.raw)
	}
	_, evs, _ = ts.postRun(t, `{"prompt":"q","session":"rc-2"}`)
	last = evs[len(evs)-1]
	if last.name != "error" || last.data["session"] != "rc-2" || last.data["kind"] != string(loop.KindMaxToolCalls) {
		t.Errorf("error %s", last.raw)
	}
}
