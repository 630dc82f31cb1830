package anthropic_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/anthropictest"
	"github.com/agcore/agrun/internal/testing/providertest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/anthropic"
	"github.com/agcore/agrun/registry"
)

func TestSuite(t *testing.T) { providertest.Run(t, providertest.Anthropic) }

// echo is a tool that answers its arguments.
func echo() registry.Tool {
	t, err := registry.NewFunc("echo", "echo", func(_ context.Context, in map[string]any) (map[string]any, error) { return in, nil })
	if err != nil {
		panic(err)
	}
	return t
}

func runOnce(t *testing.T, srv *anthropictest.Server, cfg anthropic.Config) []loop.RequestInfo {
	t.Helper()
	cfg.BaseURL, cfg.APIKey, cfg.Model = srv.URL, "k", "claude-sonnet-4-5"
	p, err := anthropic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var infos []loop.RequestInfo
	c, err := loop.New(loop.Config{Provider: p, System: strings.Repeat("You are careful. ", 200),
		Hooks: loop.Hooks{OnRequest: func(i loop.RequestInfo) { infos = append(infos, i) }}})
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	reg.Register(echo())
	for _, err := range c.SubmitStreamWithTools(context.Background(), "go", reg) {
		if err != nil {
			t.Fatal(err)
		}
	}
	return infos
}

// Prompt caching is on by default: the system prompt, the last tool and
// the end of the conversation carry cache_control, and the second request
// of a run reads the first one's prefix from the cache.
func TestPromptCacheByDefault(t *testing.T) {
	script := []anthropictest.Reply{{ToolCalls: []anthropictest.Call{{ID: "toolu_1", Name: "echo", Args: `{"x":1}`}}}, {Text: "done"}}
	srv := anthropictest.New(t, script...)
	infos := runOnce(t, srv, anthropic.Config{})
	if len(infos) != 2 || infos[0].Usage.CacheWriteTokens == 0 || infos[1].Usage.CachedTokens == 0 {
		t.Errorf("usage %+v", infos)
	}
	if infos[1].Usage.PromptTokens < infos[1].Usage.CachedTokens {
		t.Errorf("prompt tokens %d leave out the cached %d", infos[1].Usage.PromptTokens, infos[1].Usage.CachedTokens)
	}
	req := srv.Requests()[1]
	if !strings.Contains(string(req.System), "cache_control") || !strings.Contains(string(req.Tools[0].CacheControl), "ephemeral") {
		t.Errorf("system %s, tool cache_control %s", req.System, req.Tools[0].CacheControl)
	}

	off := anthropictest.New(t, script...)
	infos = runOnce(t, off, anthropic.Config{NoPromptCache: true})
	if strings.Contains(string(off.Requests()[1].Raw), "cache_control") || infos[1].Usage.CachedTokens != 0 {
		t.Errorf("NoPromptCache: %s", off.Requests()[1].Raw)
	}
}

// An overload announced inside a stream is retried like a 529, and event
// types the adapter does not know are ignored.
func TestStreamOverloadRetriedAndUnknownEventsIgnored(t *testing.T) {
	events := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
		"event: future_event\ndata: {\"type\":\"future_event\",\"whatever\":[1,2,3]}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"future_delta\",\"x\":1}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"fine\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	srv := anthropictest.New(t, anthropictest.Reply{StreamError: "overloaded_error"}, anthropictest.Reply{Events: events})
	p, _ := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "k", Model: "claude-sonnet-4-5"})
	c, _ := loop.New(loop.Config{Provider: p})
	var retries int
	var text string
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "hi", nil) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *loop.Retry:
			retries++
			if e.Status != 529 {
				t.Errorf("retry %+v", e)
			}
		case *loop.TextDelta:
			text += e.Text
		}
	}
	if retries != 1 || text != "fine" {
		t.Errorf("retries %d, text %q", retries, text)
	}
}

// Models that think adaptively get thinking.type "adaptive" and an
// effort, not a budget: the SDK would print a deprecation warning on
// stderr at every request, and the round trip works the same.
func TestAdaptiveThinking(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	defer func() { os.Stderr = stderr }()
	srv := anthropictest.New(t,
		anthropictest.Reply{Thinking: "hmm", ToolCalls: []anthropictest.Call{{ID: "toolu_1", Name: "echo", Args: `{}`}}},
		anthropictest.Reply{Text: "done"})
	p, _ := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "k", Model: "claude-opus-4-6", Reasoning: "medium"})
	c, _ := loop.New(loop.Config{Provider: p})
	reg := registry.New()
	reg.Register(echo())
	resp, err := c.SubmitWithTools(context.Background(), "go", reg)
	w.Close()
	os.Stderr = stderr
	printed, _ := io.ReadAll(r)
	if err != nil || resp.Text != "done" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	req := srv.Requests()[0]
	if !strings.Contains(string(req.Thinking), `"adaptive"`) || !strings.Contains(string(req.OutputConfig), `"effort":"medium"`) {
		t.Errorf("thinking %s, output_config %s", req.Thinking, req.OutputConfig)
	}
	if len(printed) > 0 {
		t.Errorf("the SDK printed on stderr: %s", printed)
	}
}

// A conversation begun with another API may hold call ids the Messages
// API refuses ("functions.f:0", as Kimi's Chat Completions send): they
// are replaced by one stable id, the same in the tool_use and its
// tool_result.
func TestForeignToolIDs(t *testing.T) {
	history := []loop.Message{
		{Role: loop.RoleUser, Content: "q"},
		{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "functions.echo:0", Name: "echo", Arguments: `{}`}}},
		{Role: loop.RoleTool, ToolCallID: "functions.echo:0", Name: "echo", Content: `{}`},
		{Role: loop.RoleAssistant, Content: "ok"},
	}
	srv := anthropictest.New(t, anthropictest.Reply{Text: "fine"})
	p, _ := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "k", Model: "claude-sonnet-4-5"})
	c, _ := loop.New(loop.Config{Provider: p, History: history})
	if resp, err := c.Submit(context.Background(), "again"); err != nil || resp.Text != "fine" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	if raw := string(srv.Requests()[0].Raw); strings.Contains(raw, "functions.echo:0") || !strings.Contains(raw, `"tool_use_id":"toolu_`) {
		t.Errorf("request %s", raw)
	}
}
