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

// A run's body may carry a JSON Schema: it is sent as response_format,
// the done event's text is the checked JSON, an answer that does not
// match twice ends the run with kind invalid_output, and a schema the
// registry refuses is a 400.
func TestRunWithSchema(t *testing.T) {
	const schema = `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`
	chat := chattest.New(t,
		chattest.Reply{Check: func(t testing.TB, got chattest.Request) {
			if !strings.Contains(string(got.ResponseFormat), `"strict":true`) {
				t.Errorf("response_format %s", got.ResponseFormat)
			}
		}, Chunks: []string{chattest.TextChunk(`{"n":`), chattest.TextChunk(`3}`), chattest.FinishChunk("stop")}},
		answer(0, "three"), answer(0, `{"n":"3"}`),
	)
	lc := &loop.Config{Provider: testprovider.Chat(t, chat.URL), Limits: loop.Limits{MaxRetries: -1}}
	ts := startServer(t, setup{opts: server.Options{Loop: lc}})

	status, evs, body := ts.postRun(t, `{"prompt":"count","schema":`+schema+`}`)
	if status != http.StatusOK {
		t.Fatalf("run: %d %s", status, body)
	}
	last := evs[len(evs)-1]
	if last.name != "done" || last.data["text"] != `{"n":3}` || evs[len(evs)-2].name != "structured_output" {
		t.Fatalf("events %v, last %s", eventNames(evs), last.raw)
	}

	status, evs, body = ts.postRun(t, `{"prompt":"count","schema":`+schema+`}`)
	if status != http.StatusOK {
		t.Fatalf("run: %d %s", status, body)
	}
	if last := evs[len(evs)-1]; last.name != "error" || last.data["kind"] != "invalid_output" {
		t.Fatalf("events %v, last %s", eventNames(evs), last.raw)
	}

	status, _, body = ts.postRun(t, `{"prompt":"count","schema":{"type":"string"}}`)
	if status != http.StatusBadRequest || !strings.Contains(body, "schema") {
		t.Errorf("bad schema: %d %s", status, body)
	}
}
