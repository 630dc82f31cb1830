//lint:file-ignore SA1019 the test server samples as servers on protocol versions before 2026-07-28 do (SEP-2577 deprecates sampling)

package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// samplingServer is a streamable-HTTP MCP server whose tool "sample"
// sends the sampling request its argument names (multi round-trip) and
// answers the text it got back; it says whether its client declared
// sampling.
func samplingServer(t *testing.T) (url string, declared func() bool) {
	var mu sync.Mutex
	var caps *sdk.ClientCapabilities
	s := sdk.NewServer(&sdk.Implementation{Name: "sampler"}, &sdk.ServerOptions{
		InitializedHandler: func(_ context.Context, req *sdk.InitializedRequest) {
			mu.Lock()
			caps = req.Session.InitializeParams().Capabilities
			mu.Unlock()
		},
	})
	text := func(s string) []sdk.Content { return []sdk.Content{&sdk.TextContent{Text: s}} }
	requests := map[string]*sdk.CreateMessageWithToolsParams{
		"plain": {MaxTokens: 1 << 30, SystemPrompt: "Be brief.\x1b[2J", Messages: []*sdk.SamplingMessageV2{
			{Role: "user", Content: text("Say\u202e hi")}, {Role: "assistant", Content: text("Hi?")}, {Role: "user", Content: text("Again.")}},
			ModelPreferences: &sdk.ModelPreferences{Hints: []*sdk.ModelHint{{Name: "claude\x07"}}}},
		"image": {MaxTokens: 10, Messages: []*sdk.SamplingMessageV2{{Role: "user", Content: []sdk.Content{&sdk.ImageContent{MIMEType: "image/png", Data: []byte("png")}}}}},
		"tools": {MaxTokens: 10, Messages: []*sdk.SamplingMessageV2{{Role: "user", Content: text("use a tool")}}, Tools: []*sdk.Tool{{Name: "t", InputSchema: map[string]any{"type": "object"}}}},
		"huge":  {MaxTokens: 10, Messages: []*sdk.SamplingMessageV2{{Role: "user", Content: text(strings.Repeat("x", MaxSamplingTextBytes+1))}}},
		"many":  {MaxTokens: 10},
		"role":  {MaxTokens: 10, Messages: []*sdk.SamplingMessageV2{{Role: "system", Content: text("x")}}},
	}
	for range MaxSamplingMessages + 1 {
		requests["many"].Messages = append(requests["many"].Messages, &sdk.SamplingMessageV2{Role: "user", Content: text("x")})
	}
	sdk.AddTool(s, &sdk.Tool{Name: "sample"}, func(_ context.Context, req *sdk.CallToolRequest, in struct {
		Which string `json:"which"`
	}) (*sdk.CallToolResult, any, error) {
		if len(req.Params.InputResponses) == 0 {
			return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{"s": requests[in.Which]}}, nil, nil
		}
		b, _ := json.Marshal(req.Params.InputResponses["s"])
		return &sdk.CallToolResult{Content: text(string(b))}, nil, nil
	})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return caps != nil && caps.Sampling != nil
	}
}

// TestSampling: with ClientOptions.Sample the client declares sampling
// (without it, not); a request reaches Sample cleaned, its maxTokens
// capped, and the reply goes back to the server; requests with images,
// tools, too many messages, too much text or a wrong role are refused,
// with a clear error, without reaching Sample; a refusal from Sample
// reaches the server with its reason.
func TestSampling(t *testing.T) {
	ctx := context.Background()
	url, declared := samplingServer(t)

	plain, err := NewClient("plain", HTTP{URL: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	if err := plain.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if declared() {
		t.Fatal("a client without Sample declared sampling")
	}

	var got []*SamplingRequest
	refuse := false
	c, err := NewClient("srv", HTTP{URL: url}, &ClientOptions{SamplingMaxTokens: 50, Sample: func(_ context.Context, r *SamplingRequest) (*SamplingReply, error) {
		got = append(got, r)
		if refuse {
			return nil, &SamplingRefused{Reason: "the user declined it"}
		}
		return &SamplingReply{Text: "hi there", Model: "m1"}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if !declared() {
		t.Fatal("a client with Sample did not declare sampling")
	}
	out, err := c.CallTool(ctx, "sample", json.RawMessage(`{"which":"plain"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `hi there`) || !strings.Contains(string(out), `m1`) || !strings.Contains(string(out), `endTurn`) {
		t.Errorf("the server got %s; want the reply's text, model and stop reason", out)
	}
	if len(got) != 1 {
		t.Fatalf("Sample called %d times", len(got))
	}
	r := got[0]
	if r.Server != "srv" || r.MaxTokens != 50 || r.Requested != 1<<30 || r.System != "Be brief.[2J" || len(r.Messages) != 3 ||
		r.Messages[0] != (SamplingMessage{Role: "user", Text: "Say hi"}) || r.Messages[1].Role != "assistant" || len(r.ModelHints) != 1 || r.ModelHints[0] != "claude" {
		t.Errorf("Sample got %+v", r)
	}

	for which, want := range map[string]string{
		"image": "message 1 is image content; agrun samples text only",
		"tools": "tools in sampling are not supported",
		"huge":  "its text is over 65536 bytes",
		"many":  "65 messages: want 1 to 64",
		"role":  "message 1: the role must be user or assistant",
	} {
		_, err := c.CallTool(ctx, "sample", json.RawMessage(`{"which":"`+which+`"}`))
		if err == nil || !strings.Contains(err.Error(), "sampling request refused by agrun: "+want) {
			t.Errorf("%s: err %v; want the refusal %q", which, err, want)
		}
	}
	if len(got) != 1 {
		t.Errorf("refused requests reached Sample: %d calls", len(got))
	}
	refuse = true
	_, err = c.CallTool(ctx, "sample", json.RawMessage(`{"which":"plain"}`))
	if err == nil || !strings.Contains(err.Error(), "sampling request refused by agrun: the user declined it") {
		t.Errorf("a refusal from Sample: %v", err)
	}

	// The rate: MaxSamplingsPerMinute requests reach Sample in a minute
	// (the two above included); the next is refused without reaching it.
	refuse = false
	for i := 2; i < MaxSamplingsPerMinute; i++ {
		if _, err := c.CallTool(ctx, "sample", json.RawMessage(`{"which":"plain"}`)); err != nil {
			t.Fatalf("request %d, within the rate: %v", i+1, err)
		}
	}
	_, err = c.CallTool(ctx, "sample", json.RawMessage(`{"which":"plain"}`))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d times a minute", MaxSamplingsPerMinute)) {
		t.Errorf("past the rate: %v, want refused", err)
	}
	if len(got) != MaxSamplingsPerMinute {
		t.Errorf("Sample called %d times, want %d", len(got), MaxSamplingsPerMinute)
	}
}
