package loop_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

type liveTool struct {
	name string
	run  func(ctx context.Context) (json.RawMessage, error)
}

func (l liveTool) Name() string                         { return l.name }
func (l liveTool) Description() string                  { return l.name }
func (l liveTool) Parameters() json.RawMessage          { return json.RawMessage(`{"type":"object"}`) }
func (l liveTool) Permissions() []permission.Permission { return nil }
func (l liveTool) Execute(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
	return l.run(ctx)
}

// TestCompletedEventsAreLive: a call's ToolExecutionCompleted reaches the
// consumer while another call of the same turn is still running (the slow
// tool finishes only after the consumer saw the fast one complete).
func TestCompletedEventsAreLive(t *testing.T) {
	seenFast := make(chan struct{})
	reg := registry.New()
	if err := reg.RegisterAll([]registry.Tool{
		liveTool{"slow", func(ctx context.Context) (json.RawMessage, error) {
			select {
			case <-seenFast:
				return json.RawMessage(`"slow"`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}},
		liveTool{"fast", func(context.Context) (json.RawMessage, error) { return json.RawMessage(`"fast"`), nil }},
	}); err != nil {
		t.Fatal(err)
	}
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "s", Name: "slow", Args: `{}`}, {ID: "f", Name: "fast", Args: `{}`}}},
		chattest.Reply{Text: "done"},
	)
	p, err := chat.New(chat.Config{BaseURL: srv.URL, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var completed []string
	for ev, err := range c.SubmitStreamWithTools(ctx, "go", reg) {
		if err != nil {
			t.Fatalf("run: %v (events were not live: the slow tool waited for the fast one's event)", err)
		}
		if e, ok := ev.(*loop.ToolExecutionCompleted); ok {
			completed = append(completed, e.ID)
			if e.ID == "f" {
				close(seenFast)
			}
		}
	}
	if len(completed) != 2 || completed[0] != "f" || completed[1] != "s" {
		t.Fatalf("completed %v, want [f s]", completed)
	}
	// The history still answers in call order.
	m := c.Messages()
	if len(m) != 5 || m[2].ToolCallID != "s" || m[3].ToolCallID != "f" {
		t.Fatalf("history %+v", m)
	}
}
