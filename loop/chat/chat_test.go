package chat_test

import (
	"net/http"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/providertest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
)

// fake adapts a chattest server to the suite.
type fake struct{ s *chattest.Server }

func (f fake) URL() string              { return f.s.URL }
func (f fake) Requests() int            { return len(f.s.Requests()) }
func (f fake) Header(i int) http.Header { return f.s.Requests()[i].Header }
func (f fake) Body(i int) []byte        { return f.s.Requests()[i].Raw }

var kit = providertest.Kit{
	API: "chat",
	Serve: func(t testing.TB, steps ...providertest.Step) providertest.Fake {
		var script []chattest.Reply
		for _, st := range steps {
			r := chattest.Reply{Text: st.Text, Reasoning: st.Reasoning}
			for _, c := range st.Calls {
				r.ToolCalls = append(r.ToolCalls, chattest.Call{ID: c.ID, Name: c.Name, Args: c.Args})
			}
			if u := st.Usage; u != nil {
				r.Usage = &chattest.Usage{PromptTokens: u.Input, CompletionTokens: u.Output, TotalTokens: u.Input + u.Output,
					CachedTokens: u.Cached, ReasoningTokens: u.Reasoning}
			}
			switch st.Fail {
			case "429":
				r = chattest.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"},
					Body: `{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`}
			case "overloaded":
				r = chattest.Reply{Status: 503, Body: `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`}
			case "400":
				r = chattest.Reply{Status: 400, Body: `{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`}
			case "overflow":
				r = chattest.Reply{Status: 400, Body: `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`}
			case "cut":
				r.Cut = true
			}
			script = append(script, r)
		}
		s := chattest.New(t, script...)
		s.RequireReasoning() // DeepSeek's thinking mode: reasoning_content must come back
		return fake{s}
	},
	Provider: func(t testing.TB, baseURL, key string, reasoning bool) loop.Provider {
		p, err := chat.New(chat.Config{BaseURL: baseURL, APIKey: key, Model: "deepseek-reasoner"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	KeyHeader: "Authorization",
	KeyValue:  func(k string) string { return "Bearer " + k },
	WantUsage: func(u providertest.Usage) loop.Usage {
		return loop.Usage{PromptTokens: int64(u.Input), CompletionTokens: int64(u.Output), TotalTokens: int64(u.Input + u.Output),
			CachedTokens: int64(u.Cached), ReasoningTokens: int64(u.Reasoning)}
	},
}

func TestSuite(t *testing.T) { providertest.Run(t, kit) }
