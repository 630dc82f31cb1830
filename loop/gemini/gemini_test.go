package gemini_test

import (
	"net/http"
	"testing"

	"github.com/agcore/agrun/internal/testing/geminitest"
	"github.com/agcore/agrun/internal/testing/providertest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/gemini"
)

type fake struct{ s *geminitest.Server }

func (f fake) URL() string              { return f.s.URL }
func (f fake) Requests() int            { return len(f.s.Requests()) }
func (f fake) Header(i int) http.Header { return f.s.Requests()[i].Header }
func (f fake) Body(i int) []byte        { return f.s.Requests()[i].Raw }

// The Gemini API gives function calls no id (Vertex does): the script
// leaves them out, so the loop's own ids are exercised.
func script(steps []providertest.Step) []geminitest.Reply {
	var out []geminitest.Reply
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
		out = append(out, r)
	}
	return out
}

var kit = providertest.Kit{
	API: "gemini",
	Serve: func(t testing.TB, steps ...providertest.Step) providertest.Fake {
		for _, k := range []string{"GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI"} {
			t.Setenv(k, "")
		}
		return fake{geminitest.New(t, script(steps)...)}
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
	WantUsage: func(u providertest.Usage) loop.Usage {
		return loop.Usage{PromptTokens: int64(u.Input), CompletionTokens: int64(u.Output), TotalTokens: int64(u.Input + u.Output),
			CachedTokens: int64(u.Cached), ReasoningTokens: int64(u.Reasoning)}
	},
}

func TestSuite(t *testing.T) { providertest.Run(t, kit) }
