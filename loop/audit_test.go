package loop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/registry"
)

// auditedTool is a funcTool that reports an audit for each call.
type auditedTool struct {
	*funcTool
	fail bool
}

func (a *auditedTool) ExecuteAudited(ctx context.Context, args json.RawMessage) (json.RawMessage, *registry.Audit, error) {
	audit := &registry.Audit{Source: "wasm", BytesIn: int64(len(args)), MemoryPeak: 1 << 20,
		Mounts: []registry.MountAudit{{Guest: "/docs", ReadBytes: 42}}}
	if a.fail {
		return nil, audit, errors.New("failed after reading")
	}
	out, err := a.fn(ctx, args)
	return out, audit, err
}

// TestToolAuditInEvents: what the registry reports of a call (its audit)
// is in the call's ToolExecutionCompleted, for a failed call too, and
// never in what the model is sent.
func TestToolAuditInEvents(t *testing.T) {
	srv := newServer(t,
		step{ToolCalls: []chattest.Call{{ID: "c1", Name: "word_count", Args: `{"text":"a b"}`}, {ID: "c2", Name: "bad", Args: `{}`}}},
		expect(func(t testing.TB, got received) {
			b, _ := json.Marshal(got.Messages)
			if strings.Contains(string(b), "memory_peak") || strings.Contains(string(b), "/docs") {
				t.Errorf("the audit reached the model: %s", b)
			}
		}, streamText("done")),
	)
	c := newCycle(t, srv, Config{})
	reg := newRegistry(t, &auditedTool{funcTool: wordCount()}, &auditedTool{funcTool: &funcTool{name: "bad", desc: "fails"}, fail: true})
	evs, err := collect(t, c, context.Background(), "x", reg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*ToolExecutionCompleted{}
	for _, ev := range evs {
		if tc, ok := ev.(*ToolExecutionCompleted); ok {
			got[tc.ID] = tc
		}
	}
	if a := got["c1"].Audit; a == nil || a.BytesIn != int64(len(`{"text":"a b"}`)) || a.Mounts[0].ReadBytes != 42 {
		t.Fatalf("c1 audit %+v", a)
	}
	if tc := got["c2"]; !tc.IsError || tc.Audit == nil || tc.Audit.MemoryPeak != 1<<20 {
		t.Fatalf("c2 %+v", tc)
	}
	b, _ := json.Marshal(got["c1"])
	if !strings.Contains(string(b), `"audit":{"source":"wasm"`) {
		t.Fatalf("tool_completed line %s", b)
	}
}
