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
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

func TestSuite(t *testing.T) { providertest.Run(t, providertest.Responses) }

type echo struct{}

func (echo) Name() string                         { return "echo" }
func (echo) Description() string                  { return "echo" }
func (echo) Parameters() json.RawMessage          { return json.RawMessage(`{"type":"object"}`) }
func (echo) Permissions() []permission.Permission { return nil }
func (echo) Execute(_ context.Context, a json.RawMessage) (json.RawMessage, error) {
	return a, nil
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
	if err := reg.Register(echo{}); err != nil {
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
	reg.Register(echo{})
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
