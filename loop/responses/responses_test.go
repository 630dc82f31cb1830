package responses_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/providertest"
	"github.com/agcore/agrun/internal/testing/responsestest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/responses"
	"github.com/agcore/agrun/registry"
)

func TestSuite(t *testing.T) { providertest.Run(t, providertest.Responses) }

// echo is a tool that answers its arguments.
func echo() registry.Tool {
	t, err := registry.NewFunc("echo", "echo", func(_ context.Context, in map[string]any) (map[string]any, error) { return in, nil })
	if err != nil {
		panic(err)
	}
	return t
}

// With Store, a request continues from the last reply with
// previous_response_id and sends only what came after it (the fake
// refuses an id it did not store, and a call output without its call in
// the stored conversation).
func TestStoreContinuesWithPreviousResponseID(t *testing.T) {
	srv := responsestest.New(t,
		responsestest.Reply{Reasoning: "Call echo.", ToolCalls: []responsestest.Call{{ID: "call_s", Name: "echo", Args: `{"x":1}`}}},
		responsestest.Reply{Text: "done"})
	p, err := responses.New(responses.Config{BaseURL: srv.URL, APIKey: "k", Model: "gpt-5", Store: true, Reasoning: "low"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	if err := reg.Register(echo()); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.SubmitWithTools(context.Background(), "go", reg); err != nil || resp.Text != "done" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	reqs := srv.Requests()
	first, second := reqs[0], reqs[1]
	if first.Store == nil || !*first.Store || len(first.Include) != 0 {
		t.Errorf("first request: store %v include %v", first.Store, first.Include)
	}
	if second.PreviousResponseID == "" || len(second.Input) != 1 || second.Input[0].Type != "function_call_output" || second.Input[0].CallID != "call_s" {
		t.Errorf("second request: previous %q, input %+v", second.PreviousResponseID, second.Input)
	}
}

// Stateless (the default): store false, encrypted reasoning asked for,
// and the reasoning item passed back unchanged before the call it
// preceded, with that call's item id.
func TestStatelessSendsReasoningBack(t *testing.T) {
	srv := responsestest.New(t,
		responsestest.Reply{Reasoning: "Call echo.", ToolCalls: []responsestest.Call{{ID: "call_s", Name: "echo", Args: `{"x":1}`}}},
		responsestest.Reply{Text: "done"})
	p, err := responses.New(responses.Config{BaseURL: srv.URL, APIKey: "k", Model: "gpt-5"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := loop.New(loop.Config{Provider: p})
	reg := registry.New()
	reg.Register(echo())
	if _, err := c.SubmitWithTools(context.Background(), "go", reg); err != nil {
		t.Fatal(err)
	}
	first, second := srv.Requests()[0], srv.Requests()[1]
	if first.Store == nil || *first.Store || len(first.Include) != 1 || first.Include[0] != "reasoning.encrypted_content" {
		t.Errorf("first request: store %v include %v", first.Store, first.Include)
	}
	var types []string
	for _, it := range second.Input {
		types = append(types, it.Type)
	}
	if strings.Join(types, ",") != "message,reasoning,function_call,function_call_output" || second.Input[1].EncryptedContent == "" || second.Input[2].ID == "" {
		t.Errorf("second input %+v", second.Input)
	}
}

func newCycle(t *testing.T, cfg responses.Config, history []loop.Message) *loop.Cycle {
	t.Helper()
	cfg.APIKey, cfg.Model = "k", "gpt-5"
	p, err := responses.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{Provider: p, History: history})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func echoRegistry(t *testing.T) *registry.Registry {
	reg := registry.New()
	if err := reg.Register(echo()); err != nil {
		t.Fatal(err)
	}
	return reg
}

// Reasoning summaries are asked for (--show-reasoning has something to
// show); an API that refuses them (an organization not verified) gets the
// request again at once without, and never again from this provider.
func TestSummaryRefusedThenLeftOut(t *testing.T) {
	refusal := responsestest.Reply{HTTPStatus: 400, Body: `{"error":{"message":"Your organization must be verified to generate reasoning summaries. Please go to: https://platform.openai.com/settings/organization/general and click on Verify Organization.","type":"invalid_request_error","param":"reasoning.summary","code":"unsupported_value"}}`}
	srv := responsestest.New(t, refusal, responsestest.Reply{Reasoning: "hidden", Text: "one"}, responsestest.Reply{Text: "two"})
	p, _ := responses.New(responses.Config{BaseURL: srv.URL, APIKey: "k", Model: "gpt-5", Reasoning: "low"})
	c, _ := loop.New(loop.Config{Provider: p})
	for _, want := range []string{"one", "two"} {
		if resp, err := c.Submit(context.Background(), "q"); err != nil || resp.Text != want {
			t.Fatalf("resp %+v err %v", resp, err)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 3 || !strings.Contains(string(reqs[0].Reasoning), `"summary":"auto"`) ||
		strings.Contains(string(reqs[1].Reasoning), "summary") || strings.Contains(string(reqs[2].Reasoning), "summary") {
		t.Errorf("reasoning params: %s | %s", reqs[0].Reasoning, reqs[1].Reasoning)
	}
}

// With Store, a previous response the API does not know (expired, or
// never stored) is not the end: the whole conversation is sent instead.
func TestStoreUnknownPreviousSendsEverything(t *testing.T) {
	history := []loop.Message{
		{Role: loop.RoleUser, Content: "before"},
		{Role: loop.RoleAssistant, Content: "done before",
			Reasoning: &loop.Reasoning{API: "responses", Endpoint: "", Model: "gpt-5", Opaque: json.RawMessage(`{"response_id":"resp_gone","stored":true,"items":[{"type":"message","id":"msg_gone"}]}`)}},
	}
	srv := responsestest.New(t, responsestest.Reply{Text: "fine"})
	history[1].Reasoning.Endpoint = srv.URL
	c := newCycle(t, responses.Config{BaseURL: srv.URL, Store: true}, history)
	if resp, err := c.Submit(context.Background(), "go on"); err != nil || resp.Text != "fine" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].PreviousResponseID != "resp_gone" || reqs[1].PreviousResponseID != "" || len(reqs[1].Input) != 3 {
		t.Errorf("requests: previous %q then %q, %d items", reqs[0].PreviousResponseID, reqs[len(reqs)-1].PreviousResponseID, len(reqs[len(reqs)-1].Input))
	}
}

// A session moves between store settings: a stateless reply is never
// continued with previous_response_id, and a stored reply's items (ids
// without encrypted content) never go to a stateless request.
func TestStoreSwitchedEitherWay(t *testing.T) {
	tool := []responsestest.Reply{{Reasoning: "r", ToolCalls: []responsestest.Call{{ID: "call_1", Name: "echo", Args: `{}`}}}, {Text: "done"}}
	for _, first := range []bool{false, true} {
		srv := responsestest.New(t, append(append([]responsestest.Reply{}, tool...), responsestest.Reply{Text: "later"})...)
		c := newCycle(t, responses.Config{BaseURL: srv.URL, Store: first, Reasoning: "low"}, nil)
		if _, err := c.SubmitWithTools(context.Background(), "go", echoRegistry(t)); err != nil {
			t.Fatal(err)
		}
		c2 := newCycle(t, responses.Config{BaseURL: srv.URL, Store: !first, Reasoning: "low"}, c.Messages())
		if resp, err := c2.Submit(context.Background(), "and?"); err != nil || resp.Text != "later" {
			t.Fatalf("store %v then %v: resp %+v err %v", first, !first, resp, err)
		}
		last := srv.Requests()[len(srv.Requests())-1]
		if last.PreviousResponseID != "" {
			t.Errorf("store %v then %v: continued from %s", first, !first, last.PreviousResponseID)
		}
	}
}
