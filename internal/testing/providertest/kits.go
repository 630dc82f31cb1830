package providertest

import (
	"net/http"
	"os"
	"testing"

	"github.com/agcore/agrun/internal/testing/anthropictest"
	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/geminitest"
	"github.com/agcore/agrun/internal/testing/responsestest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/anthropic"
	"github.com/agcore/agrun/loop/chat"
	"github.com/agcore/agrun/loop/gemini"
	"github.com/agcore/agrun/loop/responses"
)

// The kits of the module's adapters: their fake servers scripted from
// Steps, and their providers. Kits[api] finds one by its API name, for
// tests that run the CLI against each API.

// Kits are the kits of every API, by name.
var Kits = map[string]Kit{"chat": Chat, "gemini": Gemini, "responses": Responses, "anthropic": Anthropic}

// fake is a fake server as the suite sees it: its URL and what each
// request sent.
type fake[Q any] struct {
	url  string
	reqs func() []Q
	wire func(Q) (http.Header, []byte)
}

func fakeOf[Q any](url string, reqs func() []Q, wire func(Q) (http.Header, []byte)) Fake {
	return fake[Q]{url, reqs, wire}
}

func (f fake[Q]) URL() string   { return f.url }
func (f fake[Q]) Requests() int { return len(f.reqs()) }
func (f fake[Q]) Header(i int) http.Header {
	h, _ := f.wire(f.reqs()[i])
	return h
}
func (f fake[Q]) Body(i int) []byte {
	_, b := f.wire(f.reqs()[i])
	return b
}

// plain is usage as most APIs report it: prompt tokens include the
// cached ones, completion tokens the reasoning ones.
func plain(u Usage) loop.Usage {
	return loop.Usage{PromptTokens: int64(u.Input), CompletionTokens: int64(u.Output), TotalTokens: int64(u.Input + u.Output),
		CachedTokens: int64(u.Cached), ReasoningTokens: int64(u.Reasoning)}
}

// Chat is the kit of loop/chat, against chattest in DeepSeek's thinking
// mode (a tool-call turn without its reasoning_content is refused).
var Chat = Kit{
	API: "chat",
	Serve: func(t testing.TB, steps ...Step) Fake {
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
		s.RequireReasoning()
		return fakeOf(s.URL, s.Requests, func(q chattest.Request) (http.Header, []byte) { return q.Header, q.Raw })
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
	WantUsage: plain,
}

// GeminiEnv are the Gemini SDK's own variables, which would change where
// and how its client connects. The Gemini kit clears those that are set
// with t.Setenv, which a parallel test cannot call: a package that runs
// its tests in parallel unsets them first (cmd/agrun's TestMain).
var GeminiEnv = []string{"GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI"}

// Gemini is the kit of loop/gemini, against geminitest, which signs
// replies with reasoning (thought signatures) as Gemini 3 does. The
// Gemini API gives function calls no id (Vertex does): the script leaves
// them out, so the loop's own ids are exercised.
var Gemini = Kit{
	API: "gemini",
	Serve: func(t testing.TB, steps ...Step) Fake {
		for _, k := range GeminiEnv {
			if os.Getenv(k) != "" {
				t.Setenv(k, "")
			}
		}
		var script []geminitest.Reply
		for _, st := range steps {
			r := geminitest.Reply{Text: st.Text, Thought: st.Reasoning, Signatures: st.Reasoning != ""}
			for _, c := range st.Calls {
				r.ToolCalls = append(r.ToolCalls, geminitest.Call{Name: c.Name, Args: c.Args})
			}
			if u := st.Usage; u != nil {
				r.Usage = &geminitest.Usage{PromptTokens: u.Input, CandidatesTokens: u.Output - u.Reasoning, CachedTokens: u.Cached, ThoughtsTokens: u.Reasoning}
			}
			switch st.Fail {
			case "429":
				r = geminitest.ResourceExhausted() // RetryInfo: 1s
			case "overloaded":
				r = geminitest.Unavailable()
			case "400":
				r = geminitest.InvalidArgument("Invalid JSON payload received. Unknown name \"foo\": Cannot find field.")
			case "overflow":
				r = geminitest.TooManyTokens(1200000, 1048576)
			case "cut":
				r.Cut = true
			}
			script = append(script, r)
		}
		s := geminitest.New(t, script...)
		return fakeOf(s.URL, s.Requests, func(q geminitest.Request) (http.Header, []byte) { return q.Header, q.Raw })
	},
	Provider: func(t testing.TB, baseURL, key string, reasoning bool) loop.Provider {
		cfg := gemini.Config{BaseURL: baseURL, APIKey: key, Model: "gemini-3-pro-preview"}
		if reasoning {
			cfg.Reasoning = "medium"
		}
		p, err := gemini.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	KeyHeader: "x-goog-api-key",
	KeyValue:  func(k string) string { return k },
	WantUsage: plain,
}

// Responses is the kit of loop/responses (stateless: store false, the
// reasoning items passed back with their encrypted content), against
// responsestest, which refuses a reasoning item that is not the one it
// issued or not followed by the item that followed it.
var Responses = Kit{
	API: "responses",
	Serve: func(t testing.TB, steps ...Step) Fake {
		var script []responsestest.Reply
		for _, st := range steps {
			r := responsestest.Reply{Text: st.Text, Reasoning: st.Reasoning}
			for _, c := range st.Calls {
				r.ToolCalls = append(r.ToolCalls, responsestest.Call{ID: c.ID, Name: c.Name, Args: c.Args})
			}
			if u := st.Usage; u != nil {
				r.Usage = &responsestest.Usage{InputTokens: u.Input, OutputTokens: u.Output, CachedTokens: u.Cached, ReasoningTokens: u.Reasoning}
			}
			switch st.Fail {
			case "429":
				r = responsestest.RateLimited("1")
			case "overloaded":
				r = responsestest.Reply{HTTPStatus: 503, Body: `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}}`}
			case "400":
				r = responsestest.Reply{HTTPStatus: 400, Body: `{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":"unsupported_parameter"}}`}
			case "overflow":
				r = responsestest.ContextTooLong()
			case "cut":
				r.Cut = true
			}
			script = append(script, r)
		}
		s := responsestest.New(t, script...)
		return fakeOf(s.URL, s.Requests, func(q responsestest.Request) (http.Header, []byte) { return q.Header, q.Raw })
	},
	Provider: func(t testing.TB, baseURL, key string, reasoning bool) loop.Provider {
		cfg := responses.Config{BaseURL: baseURL, APIKey: key, Model: "gpt-5-mini"}
		if reasoning {
			cfg.Reasoning = "medium"
		}
		p, err := responses.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	KeyHeader: "Authorization",
	KeyValue:  func(k string) string { return "Bearer " + k },
	WantUsage: plain,
}

// Anthropic is the kit of loop/anthropic, against anthropictest, which
// refuses (with thinking on) a tool-result turn whose assistant turn does
// not start with a thinking block it signed, byte for byte.
var Anthropic = Kit{
	API: "anthropic",
	Serve: func(t testing.TB, steps ...Step) Fake {
		var script []anthropictest.Reply
		for _, st := range steps {
			r := anthropictest.Reply{Text: st.Text, Thinking: st.Reasoning}
			for _, c := range st.Calls {
				r.ToolCalls = append(r.ToolCalls, anthropictest.Call{ID: c.ID, Name: c.Name, Args: c.Args})
			}
			if u := st.Usage; u != nil {
				// input_tokens is what the cache did not serve.
				r.Usage = &anthropictest.Usage{InputTokens: u.Input - u.Cached, OutputTokens: u.Output,
					CacheReadInputTokens: u.Cached, ThinkingTokens: u.Reasoning}
			}
			switch st.Fail {
			case "429":
				r = anthropictest.RateLimited("1")
			case "overloaded":
				r = anthropictest.Overloaded()
			case "400":
				r = anthropictest.InvalidRequest("messages.0.content: Input should be a valid list")
			case "overflow":
				r = anthropictest.PromptTooLong(210000, 200000)
			case "cut":
				r.Cut = true
			}
			script = append(script, r)
		}
		s := anthropictest.New(t, script...)
		return fakeOf(s.URL, s.Requests, func(q anthropictest.Request) (http.Header, []byte) { return q.Header, q.Raw })
	},
	Provider: func(t testing.TB, baseURL, key string, reasoning bool) loop.Provider {
		cfg := anthropic.Config{BaseURL: baseURL, APIKey: key, Model: "claude-sonnet-4-5"}
		if reasoning {
			cfg.Reasoning = "low"
		}
		p, err := anthropic.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	// anthropic-sdk-go sends the key as a bearer token (with
	// anthropic-version 2026-10-21), as Anthropic's current docs say.
	KeyHeader: "Authorization",
	KeyValue:  func(k string) string { return "Bearer " + k },
	WantUsage: plain,
}
