//go:build cluster

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/internal/testing/pgtest"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/session/pgstore"
)

// pacedReply is a streamed reply of parts written 150 ms apart.
func pacedReply(parts ...string) chattest.Reply {
	var cs []string
	for _, p := range parts {
		cs = append(cs, chattest.TextChunk(p))
	}
	return chattest.Reply{Chunks: append(cs, chattest.FinishChunk("stop")), ChunkEvery: 150 * time.Millisecond}
}

// TestClusterLiveText (issue 28): with session_store = "postgres", a
// reply's text streams live from the worker: `agrun run --json` prints
// several text_delta lines whose concatenation is the reply stored in
// PostgreSQL (and the done event's text); a step whose stream broke off
// and was retried shows no text twice; and a run through `agrun serve`
// streams text_delta events the same way.
func TestClusterLiveText(t *testing.T) {
	t.Parallel()
	addr := devtemporal.Start(t)
	dsn := pgtest.Start(t)
	dsnEnv := setenvOwn(t, "AGRUN_TEST_DSN", dsn)
	srv := chattest.New(t,
		pacedReply("Streams ", "come ", "in ", "small ", "pieces."),
		chattest.Reply{Text: "Once upon", Cut: true}, // broken off: the step is retried
		pacedReply("Once ", "upon ", "a time."),
		pacedReply("Served ", "live ", "too."),
		reasonedReply(),
		reasonedReply(),
	)
	e := newTestEnv(t, srv.URL, fmt.Sprintf(`
[cluster]
temporal_address = %q
task_queue_prefix = "live-"
heartbeat_timeout = "2s"
module_store = "objects"
session_store = "postgres"
postgres_dsn_env = %q
`, addr, dsnEnv))
	startWorker(t, e, "w1")
	pg, err := pgstore.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	stored := func(id string) string {
		recs, err := pg.Load(context.Background(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		h, err := session.Codec{}.History(recs)
		if err != nil || len(h) == 0 {
			t.Fatalf("session %s: %v", id, err)
		}
		return h[len(h)-1].Content
	}
	deltas := func(out string) (n int, text, done string) {
		for _, line := range strings.Split(out, "\n") {
			var ev struct{ Type, Text string }
			if json.Unmarshal([]byte(line), &ev) != nil {
				continue
			}
			switch ev.Type {
			case "text_delta":
				n++
				text += ev.Text
			case "reply_restated":
				text = ""
			case "done":
				done = ev.Text
			}
		}
		return n, text, done
	}
	for _, tc := range []struct{ id, want string }{{"live1", "Streams come in small pieces."}, {"live2", "Once upon a time."}} {
		r := e.run("", "run", "--json", "--session", tc.id, "go")
		n, text, done := deltas(r.stdout)
		if r.code != 0 || n < 2 || text != tc.want || done != tc.want || stored(tc.id) != tc.want {
			t.Fatalf("%s: %d text deltas %q, done %q, stored %q; run %+v", tc.id, n, text, done, stored(tc.id), r)
		}
		if tc.id == "live1" && n < 3 {
			t.Fatalf("live1: %d text deltas, want several: %s", n, r.stdout)
		}
	}

	// Through agrun serve.
	cmd := exec.Command(binary(t), "-c", e.config, "serve", "--addr", "127.0.0.1:0")
	token := strings.Repeat("t", 32)
	cmd.Env = append(os.Environ(), "AGRUN_TEST_KEY=k", "AGRUN_TOKENS="+token)
	line := startDaemon(t, cmd, "serving on ", true)
	_, rest, _ := strings.Cut(line, "serving on ")
	base, _, _ := strings.Cut(rest, " ")
	st, events, body, _ := streamRun(t, base, token, `{"prompt":"go","session":"live3"}`)
	if st != http.StatusOK {
		t.Fatalf("POST /v1/runs: %d %s", st, body)
	}
	var seen []sseEvent
	done := until(t, events, "done", &seen)
	var n int
	var text string
	for _, ev := range seen {
		if ev.typ == "text_delta" {
			n++
			text += fmt.Sprint(ev.data["text"])
		}
	}
	if n < 3 || text != "Served live too." || done.data["text"] != text {
		t.Fatalf("serve: %d text deltas %q, done %s", n, text, done.raw)
	}

	// The reasoning streams through serve too when the client asks
	// (show_reasoning), as on a local serve; not otherwise.
	for _, show := range []bool{true, false} {
		id := fmt.Sprintf("live-reasoning-%v", show)
		st, events, body, _ := streamRun(t, base, token, fmt.Sprintf(`{"prompt":"go","session":%q,"show_reasoning":%v}`, id, show))
		if st != http.StatusOK {
			t.Fatalf("POST /v1/runs: %d %s", st, body)
		}
		seen = nil
		done := until(t, events, "done", &seen)
		var reasoning string
		for _, ev := range seen {
			if ev.typ == "reasoning_delta" {
				reasoning += fmt.Sprint(ev.data["text"])
			}
		}
		want := ""
		if show {
			want = "thinking it over"
		}
		if reasoning != want || done.data["text"] != "Yes." {
			t.Fatalf("show_reasoning %v: reasoning %q, want %q; done %s", show, reasoning, want, done.raw)
		}
	}
}

// reasonedReply is a streamed reply whose reasoning ("thinking it over")
// comes before its text ("Yes."), its parts 150 ms apart.
func reasonedReply() chattest.Reply {
	return chattest.Reply{Chunks: []string{
		chattest.ReasoningChunk("reasoning_content", "thinking "), chattest.ReasoningChunk("reasoning_content", "it over"),
		chattest.TextChunk("Yes."), chattest.FinishChunk("stop"),
	}, ChunkEvery: 150 * time.Millisecond}
}
