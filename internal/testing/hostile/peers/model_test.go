package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
)

// counter is a tool that counts its executions.
type counter struct{ n atomic.Int64 }

func (c *counter) Name() string                         { return "counter" }
func (c *counter) Description() string                  { return "counts calls" }
func (c *counter) Parameters() json.RawMessage          { return json.RawMessage(`{"type":"object"}`) }
func (c *counter) Permissions() []permission.Permission { return nil }
func (c *counter) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(fmt.Sprint(c.n.Add(1))), nil
}

// TestModelOutput: a model that calls tools that do not exist, writes
// broken arguments, asks for thousands of calls in one turn or repeats
// itself forever gets typed error messages back, and the run ends within
// its bounds with a history that is still valid to send.
func TestModelOutput(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	cnt := &counter{}
	f.Register(t, cnt)

	many := make([]chattest.Call, 5000)
	for i := range many {
		many[i] = chattest.Call{ID: fmt.Sprintf("c%d", i), Name: "counter", Args: `{}`}
	}
	repeat := chattest.Reply{ToolCalls: []chattest.Call{{ID: "r", Name: "counter", Args: `{"same":true}`}}}
	for _, c := range []struct {
		name    string
		script  []chattest.Reply
		wantErr error           // of the run; nil = ends with an answer
		kinds   []registry.Kind // of the tool messages, in order (checked as a prefix)
		maxRuns int64           // bound on counter executions
	}{
		{"unknown tool", []chattest.Reply{
			{ToolCalls: []chattest.Call{{ID: "a", Name: "rm_rf", Args: `{}`}, {ID: "b", Name: "word_count\x1b[2J", Args: `{}`}}}, {Text: "done"}},
			nil, []registry.Kind{registry.NotFound, registry.NotFound}, 0},
		{"invalid JSON arguments", []chattest.Reply{
			{ToolCalls: []chattest.Call{{ID: "a", Name: "word_count", Args: `{"text": "unterminated`}, {ID: "b", Name: "word_count", Args: `[1,2]`}, {ID: "c", Name: "counter", Args: `{"a":1,"a":2}`}}}, {Text: "done"}},
			nil, []registry.Kind{registry.InvalidArguments, registry.InvalidArguments, registry.InvalidArguments}, 0},
		{"huge arguments", []chattest.Reply{
			{ToolCalls: []chattest.Call{{ID: "a", Name: "counter", Args: `{"s":"` + strings.Repeat("x", 2<<20) + `"}`}}}, {Text: "done"}},
			nil, []registry.Kind{registry.InvalidArguments}, 0},
		{"thousands of calls in one turn", []chattest.Reply{{ToolCalls: many}, {Text: "done"}},
			nil, nil, loop.DefaultMaxToolCallsPerTurn},
		{"hostile calls of the built-in page tool", []chattest.Reply{
			{ToolCalls: []chattest.Call{{ID: "a", Name: loop.PageToolName, Args: `[1]`}, {ID: "b", Name: loop.PageToolName, Args: `{"call_id":"x","offset":1e30}`},
				{ID: "c", Name: loop.PageToolName, Args: `{"call_id":"\u202e\u0000` + strings.Repeat("z", 1<<16) + `"}`}, {ID: "d", Name: loop.PageToolName, Args: `{"call_id":"a","offset":-1,"length":-1}`}}},
			{ToolCalls: []chattest.Call{{ID: "e", Name: loop.PageToolName, Args: `{"call_id":"a","offset":-1}`}, {ID: "f", Name: loop.PageToolName, Args: `{"call_id":"a","length":0}`}}}, {Text: "done"}},
			nil, []registry.Kind{registry.InvalidArguments, registry.InvalidArguments, registry.NotFound, registry.NotFound, registry.InvalidArguments, registry.InvalidArguments}, 0},
		{"endless repetition", []chattest.Reply{repeat, repeat, repeat, repeat, repeat, repeat, repeat, repeat, repeat, repeat, repeat, repeat},
			loop.ErrRepeatedCall, nil, loop.RepeatLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := chattest.New(t, c.script...)
			cnt.n.Store(0)
			before := f.Snapshot(t)
			tr := &http.Transport{}
			p, err := chat.New(chat.Config{BaseURL: srv.URL, Model: "m", HTTPClient: &http.Client{Transport: tr}})
			hostile.Must(t, err)
			cy, err := loop.New(loop.Config{Provider: p, Limits: loop.Limits{MaxTurns: 20}})
			hostile.Must(t, err)
			resp, err := cy.SubmitWithTools(context.Background(), "go", f.Reg)
			if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Errorf("run error %v; want %v", err, c.wantErr)
			}
			if err == nil && resp.Text != "done" {
				t.Errorf("answer %q", resp.Text)
			}
			if n := cnt.n.Load(); n > c.maxRuns {
				t.Errorf("counter ran %d times; want at most %d", n, c.maxRuns)
			}
			var toolMsgs []loop.Message
			answered := map[string]bool{}
			for _, m := range cy.Messages() {
				if m.Role == loop.RoleTool {
					toolMsgs = append(toolMsgs, m)
					answered[m.ToolCallID] = true
					hostile.CheckModelText(t, m.Content)
					if len(m.Content) > 64<<10 {
						t.Errorf("tool message of %d bytes", len(m.Content))
					}
				}
			}
			for _, m := range cy.Messages() { // the history stays valid: every call answered
				for _, tc := range m.ToolCalls {
					if !answered[tc.ID] {
						t.Errorf("call %s has no tool message", tc.ID)
					}
				}
			}
			for i, k := range c.kinds {
				if i >= len(toolMsgs) || !strings.HasPrefix(toolMsgs[i].Content, "error ("+string(k)+"): ") {
					t.Errorf("tool message %d: %q; want error (%s)", i, toolMsgs[min(i, len(toolMsgs)-1)].Content, k)
				}
			}
			tr.CloseIdleConnections()
			f.After(t, before, hostile.Outcome{}, "")
		})
	}
}
