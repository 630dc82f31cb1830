package geminitest_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/agcore/agrun/internal/testing/geminitest"
)

const model = "gemini-3-pro-preview"

// clearEnv empties the variables genai reads, so that tests do not
// depend on them.
func clearEnv(t *testing.T) {
	for _, k := range []string{"GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL",
		"GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_CLOUD_REGION"} {
		t.Setenv(k, "")
	}
}

// newClient is a genai client of srv, whatever the environment says.
func newClient(t *testing.T, srv *geminitest.Server) *genai.Client {
	t.Helper()
	clearEnv(t)
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: "k", Backend: genai.BackendGeminiAPI, HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// apiError fails the test unless err is a genai.APIError of this code and
// status, and returns it.
func apiError(t *testing.T, err error, code int, status string) genai.APIError {
	t.Helper()
	var e genai.APIError
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want a genai.APIError", err, err)
	}
	if e.Code != code || e.Status != status {
		t.Fatalf("error = %d %s %q, want %d %s", e.Code, e.Status, e.Message, code, status)
	}
	return e
}

func missingSignature(name string, position int) string {
	return fmt.Sprintf("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%s` , position %d. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.", name, position)
}

// TestStream: a streamed reply comes as an SSE stream of a thought
// summary, the text in chunks, and finishReason, usage and the signature
// on the last chunk only.
func TestStream(t *testing.T) {
	ctx := context.Background()
	srv := geminitest.New(t, geminitest.Reply{
		Thought: "Let me think.", Text: "Hello, streaming world!", Signatures: true,
		Usage: &geminitest.Usage{PromptTokens: 7, CandidatesTokens: 3, CachedTokens: 2, ThoughtsTokens: 4},
	})
	c := newClient(t, srv)
	var thought, text strings.Builder
	var sig []byte
	var last *genai.GenerateContentResponse
	n := 0
	for resp, err := range c.Models.GenerateContentStream(ctx, model, genai.Text("hi"), &genai.GenerateContentConfig{
		ThinkingConfig: &genai.ThinkingConfig{IncludeThoughts: true, ThinkingLevel: genai.ThinkingLevelLow},
	}) {
		if err != nil {
			t.Fatal(err)
		}
		if last != nil && last.Candidates[0].FinishReason != "" {
			t.Errorf("chunk %d has finishReason %q, but a chunk follows it", n-1, last.Candidates[0].FinishReason)
		}
		n++
		last = resp
		if got := resp.Candidates[0].Content.Role; got != "model" {
			t.Errorf("role = %q, want model", got)
		}
		for _, p := range resp.Candidates[0].Content.Parts {
			if p.Thought {
				thought.WriteString(p.Text)
			} else {
				text.WriteString(p.Text)
			}
			if p.ThoughtSignature != nil {
				sig = p.ThoughtSignature
			}
		}
	}
	if n < 4 {
		t.Errorf("%d chunks, want the thought and the text in several", n)
	}
	if thought.String() != "Let me think." || text.String() != "Hello, streaming world!" {
		t.Errorf("thought %q, text %q", thought.String(), text.String())
	}
	if last.Candidates[0].FinishReason != genai.FinishReasonStop {
		t.Errorf("last finishReason = %q, want STOP", last.Candidates[0].FinishReason)
	}
	u := last.UsageMetadata
	if u.PromptTokenCount != 7 || u.CandidatesTokenCount != 3 || u.CachedContentTokenCount != 2 || u.ThoughtsTokenCount != 4 || u.TotalTokenCount != 14 {
		t.Errorf("usage = %+v", u)
	}
	if last.ModelVersion != model || last.ResponseID == "" {
		t.Errorf("modelVersion %q, responseId %q", last.ModelVersion, last.ResponseID)
	}
	if sigs := srv.Signatures(); len(sigs) != 1 || !bytes.Equal(sig, sigs[0]) {
		t.Errorf("signature %x, server sent %x", sig, sigs)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if !r.Stream || r.Model != model || r.Query.Get("alt") != "sse" || r.Header.Get("x-goog-api-key") != "k" {
		t.Errorf("request: stream %v, model %q, query %v, key %q", r.Stream, r.Model, r.Query, r.Header.Get("x-goog-api-key"))
	}
	if len(r.Contents) != 1 || r.Contents[0].Role != "user" || r.Contents[0].Parts[0].Text != "hi" {
		t.Errorf("contents = %+v", r.Contents)
	}
	if !strings.Contains(string(r.GenerationConfig), `"thinkingLevel":"LOW"`) {
		t.Errorf("generationConfig = %s", r.GenerationConfig)
	}
}

// TestCalls: a generateContent reply with parallel calls has them without
// ids, the signature on the first only, finishReason STOP and the default
// usage; the tools and the structured output config are taken.
func TestCalls(t *testing.T) {
	ctx := context.Background()
	srv := geminitest.New(t, geminitest.Reply{
		ToolCalls:  []geminitest.Call{{Name: "get_weather", Args: `{"city":"Paris"}`}, {Name: "get_time", Args: `{"tz":"CET"}`}},
		Signatures: true,
		Check: func(t testing.TB, got geminitest.Request) {
			if got.Stream || !strings.Contains(string(got.Tools), `"get_weather"`) {
				t.Errorf("stream %v, tools %s", got.Stream, got.Tools)
			}
		},
	})
	c := newClient(t, srv)
	budget := int32(1024)
	resp, err := c.Models.GenerateContent(ctx, model, genai.Text("weather and time in Paris?"), &genai.GenerateContentConfig{
		SystemInstruction: genai.NewContentFromText("Be brief.", ""),
		Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{
			{Name: "get_weather", Description: "The weather", ParametersJsonSchema: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}},
			{Name: "get_time", Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"tz": {Type: genai.TypeString}}}},
		}}},
		ThinkingConfig:     &genai.ThinkingConfig{IncludeThoughts: true, ThinkingBudget: &budget},
		ResponseMIMEType:   "application/json",
		ResponseJsonSchema: map[string]any{"type": "object"},
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.FunctionCalls()
	if len(calls) != 2 || calls[0].Name != "get_weather" || calls[0].Args["city"] != "Paris" || calls[1].Name != "get_time" || calls[1].Args["tz"] != "CET" {
		t.Fatalf("calls = %+v", calls)
	}
	if calls[0].ID != "" || calls[1].ID != "" {
		t.Errorf("call ids %q %q, want none", calls[0].ID, calls[1].ID)
	}
	parts := resp.Candidates[0].Content.Parts
	if !bytes.Equal(parts[0].ThoughtSignature, srv.Signatures()[0]) || parts[1].ThoughtSignature != nil {
		t.Errorf("signatures %x and %x, server sent %x", parts[0].ThoughtSignature, parts[1].ThoughtSignature, srv.Signatures())
	}
	if resp.Candidates[0].FinishReason != genai.FinishReasonStop {
		t.Errorf("finishReason = %q", resp.Candidates[0].FinishReason)
	}
	if u := resp.UsageMetadata; u.PromptTokenCount != 10 || u.CandidatesTokenCount != 5 || u.TotalTokenCount != 15 {
		t.Errorf("usage = %+v", u)
	}
}

// TestSignatureRoundTrip: a model turn sent back with its signature
// passes; without it, or with it altered, the request fails as Gemini 3's
// does and uses no reply; older turns are not checked.
func TestSignatureRoundTrip(t *testing.T) {
	ctx := context.Background()
	srv := geminitest.New(t,
		geminitest.Reply{ToolCalls: []geminitest.Call{{Name: "get_weather", Args: `{"city":"Paris"}`}}, Signatures: true},
		geminitest.Reply{Text: "It is sunny."},
		geminitest.Reply{Text: "Bye."},
	)
	c := newClient(t, srv)
	user := genai.NewContentFromText("weather in Paris?", genai.RoleUser)
	resp, err := c.Models.GenerateContent(ctx, model, []*genai.Content{user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	modelTurn := resp.Candidates[0].Content
	answer := genai.NewContentFromParts([]*genai.Part{genai.NewPartFromFunctionResponse("get_weather", map[string]any{"sky": "clear"})}, genai.RoleUser)
	with := func(sig []byte) []*genai.Content {
		m := *modelTurn
		p := *m.Parts[0]
		p.ThoughtSignature = sig
		m.Parts = []*genai.Part{&p}
		return []*genai.Content{user, &m, answer}
	}
	sig := srv.Signatures()[0]

	_, err = c.Models.GenerateContent(ctx, model, with(nil), nil)
	if e := apiError(t, err, 400, "INVALID_ARGUMENT"); e.Message != missingSignature("get_weather", 2) {
		t.Errorf("missing signature: message %q", e.Message)
	}
	altered := append([]byte(nil), sig...)
	altered[len(altered)-1] ^= 1
	_, err = c.Models.GenerateContent(ctx, model, with(altered), nil)
	if e := apiError(t, err, 400, "INVALID_ARGUMENT"); e.Message != "Corrupted thought signature." {
		t.Errorf("altered signature: message %q", e.Message)
	}
	// Moved to the answer's part: corrupted too.
	moved := with(sig)
	moved[1].Parts[0].ThoughtSignature = nil
	moved[2] = genai.NewContentFromParts([]*genai.Part{{FunctionResponse: answer.Parts[0].FunctionResponse, ThoughtSignature: sig}}, genai.RoleUser)
	_, err = c.Models.GenerateContent(ctx, model, moved, nil)
	apiError(t, err, 400, "INVALID_ARGUMENT")

	history := with(sig)
	resp, err = c.Models.GenerateContent(ctx, model, history, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "It is sunny." {
		t.Errorf("text = %q, want the second reply (refused requests use none)", resp.Text())
	}
	reqs := srv.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d requests recorded, want 5 (refused ones too)", len(reqs))
	}
	sent, err := base64.StdEncoding.DecodeString(reqs[4].Contents[1].Parts[0].ThoughtSignature)
	if err != nil || !bytes.Equal(sent, sig) {
		t.Errorf("signature sent back %q (%v), want %x", reqs[4].Contents[1].Parts[0].ThoughtSignature, err, sig)
	}
	if fc := reqs[4].Contents[1].Parts[0].FunctionCall; fc == nil || fc.Name != "get_weather" || string(fc.Args) != `{"city":"Paris"}` {
		t.Errorf("function call sent back = %+v", fc)
	}
	if fr := reqs[4].Contents[2].Parts[0].FunctionResponse; fr == nil || fr.Name != "get_weather" || string(fr.Response) != `{"sky":"clear"}` {
		t.Errorf("function response sent back = %+v", fr)
	}

	// A new user turn: the signed turn is no longer the current one, and
	// only the current turn is checked.
	old := with(nil)
	old = append(old, resp.Candidates[0].Content, genai.NewContentFromText("thanks", genai.RoleUser))
	resp, err = c.Models.GenerateContent(ctx, model, old, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "Bye." {
		t.Errorf("text = %q", resp.Text())
	}
}

// TestTextSignature: without calls the signature is on the last part (an
// empty text part of the last chunk when streamed); sent back as genai
// sends it, it passes, and leaving it out passes too.
func TestTextSignature(t *testing.T) {
	ctx := context.Background()
	srv := geminitest.New(t,
		geminitest.Reply{Text: "Hi.", Signatures: true},
		geminitest.Reply{Text: "Hello again.", Signatures: true},
		geminitest.Reply{Text: "ok"}, geminitest.Reply{Text: "ok"},
	)
	c := newClient(t, srv)
	user := genai.NewContentFromText("hi", genai.RoleUser)
	resp, err := c.Models.GenerateContent(ctx, model, []*genai.Content{user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Candidates[0].Content.Parts; len(p) != 1 || p[0].Text != "Hi." || !bytes.Equal(p[0].ThoughtSignature, srv.Signatures()[0]) {
		t.Errorf("parts = %+v", p)
	}
	var parts []*genai.Part
	for r, err := range c.Models.GenerateContentStream(ctx, model, []*genai.Content{user}, nil) {
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, r.Candidates[0].Content.Parts...)
	}
	lastPart := parts[len(parts)-1]
	if lastPart.Text != "" || !bytes.Equal(lastPart.ThoughtSignature, srv.Signatures()[1]) {
		t.Errorf("last streamed part = %+v", lastPart)
	}
	streamed := genai.NewContentFromParts(parts, genai.RoleModel)
	for _, h := range [][]*genai.Content{
		{user, streamed, genai.NewContentFromText("and?", genai.RoleUser)},
		{user, genai.NewContentFromText("Hello again.", genai.RoleModel), genai.NewContentFromText("and?", genai.RoleUser)},
	} {
		if _, err := c.Models.GenerateContent(ctx, model, h, nil); err != nil {
			t.Error(err)
		}
	}
}

// TestFunctionResponses: function responses must answer the calls of the
// model turn right before them, one each, by name (and id, when the call
// had one).
func TestFunctionResponses(t *testing.T) {
	ctx := context.Background()
	srv := geminitest.New(t, geminitest.Reply{ToolCalls: []geminitest.Call{
		{ID: "call_1", Name: "get_weather", Args: `{"city":"Paris"}`},
		{Name: "get_time", Args: `{}`},
	}})
	c := newClient(t, srv)
	user := genai.NewContentFromText("weather and time?", genai.RoleUser)
	resp, err := c.Models.GenerateContent(ctx, model, []*genai.Content{user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Candidates[0].Content
	if got := resp.FunctionCalls(); got[0].ID != "call_1" || got[1].ID != "" {
		t.Errorf("ids %q %q", got[0].ID, got[1].ID)
	}
	fr := func(id, name string) *genai.Part {
		return &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: id, Name: name, Response: map[string]any{"ok": true}}}
	}
	answer := func(parts ...*genai.Part) *genai.Content { return genai.NewContentFromParts(parts, genai.RoleUser) }
	const count = "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
	for _, tc := range []struct {
		name     string
		contents []*genai.Content
		msg      string
	}{
		{"one response for two calls", []*genai.Content{user, calls, answer(fr("call_1", "get_weather"))}, count},
		{"three responses for two calls", []*genai.Content{user, calls, answer(fr("call_1", "get_weather"), fr("", "get_time"), fr("", "get_time"))}, count},
		{"wrong name", []*genai.Content{user, calls, answer(fr("call_1", "get_weather"), fr("", "get_date"))}, "Request contains an invalid argument."},
		{"wrong id", []*genai.Content{user, calls, answer(fr("call_2", "get_weather"), fr("", "get_time"))}, "Request contains an invalid argument."},
		{"no call turn before", []*genai.Content{user, genai.NewContentFromText("ok", genai.RoleModel), answer(fr("", "get_time"))}, "Please ensure that function response turn comes immediately after a function call turn."},
		{"call turn first", []*genai.Content{calls, answer(fr("call_1", "get_weather"), fr("", "get_time"))}, "Please ensure that function call turn comes immediately after a user turn or after a function response turn."},
		{"call turn after a model turn", []*genai.Content{user, genai.NewContentFromText("ok", genai.RoleModel), calls}, "Please ensure that function call turn comes immediately after a user turn or after a function response turn."},
		{"bad role", []*genai.Content{genai.NewContentFromText("hi", "assistant")}, "Please use a valid role: user, model."},
	} {
		_, err := c.Models.GenerateContent(ctx, model, tc.contents, nil)
		if e := apiError(t, err, 400, "INVALID_ARGUMENT"); e.Message != tc.msg {
			t.Errorf("%s: message %q, want %q", tc.name, e.Message, tc.msg)
		}
	}

	// In any order, with the id where the call had one: taken.
	srv.Add(geminitest.Reply{Text: "Sunny, 3pm."})
	resp, err = c.Models.GenerateContent(ctx, model, []*genai.Content{user, calls, answer(fr("", "get_time"), fr("call_1", "get_weather"))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "Sunny, 3pm." {
		t.Errorf("text = %q", resp.Text())
	}
}

// post sends a body to the server as is.
func post(t *testing.T, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// errorOf decodes an error body of the API's shape.
func errorOf(t *testing.T, body string) (code int, status, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return e.Error.Code, e.Error.Status, e.Error.Message
}

// TestValidation: the server refuses, with the API's status and message,
// the bodies the API refuses, and takes the spellings it takes.
func TestValidation(t *testing.T) {
	srv := geminitest.New(t)
	url := srv.URL + "/v1beta/models/" + model + ":generateContent"
	key := map[string]string{"x-goog-api-key": "k"}
	const hi = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]`
	for _, tc := range []struct {
		name, body string
		msg        string // "" for a request the API takes
	}{
		{"empty", `{}`, "* GenerateContentRequest.contents: contents is not specified\n"},
		{"not JSON", `{"contents":`, "Invalid JSON payload received. Unexpected token."},
		{"unknown field", hi + `,"foo":1}`, `Invalid JSON payload received. Unknown name "foo": Cannot find field.`},
		{"unknown part field", `{"contents":[{"parts":[{"text":"a","txt":"b"}]}]}`, `Invalid JSON payload received. Unknown name "txt" at 'contents[0].parts[0]': Cannot find field.`},
		{"unknown thinking field", hi + `,"generationConfig":{"thinkingConfig":{"budget":1}}}`, `Invalid JSON payload received. Unknown name "budget" at 'generation_config.thinking_config': Cannot find field.`},
		{"empty parts", `{"contents":[{"role":"user","parts":[]}]}`, "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty.\n"},
		{"part without data", `{"contents":[{"role":"user","parts":[{}]}]}`, "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must have one initialized field\n"},
		{"part with two data", `{"contents":[{"role":"user","parts":[{"text":"a","functionCall":{"name":"f"}}]}]}`, "Invalid JSON payload received. Oneof field 'data' is already set. Cannot set 'functionCall'"},
		{"call without name", `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"functionCall":{"args":{}}}]}]}`, "* GenerateContentRequest.contents[1].parts[0].function_call.name: Name cannot be empty.\n"},
		{"signature not base64", `{"contents":[{"role":"user","parts":[{"text":"a","thoughtSignature":"#!"}]}]}`, `Invalid value at 'contents[0].parts[0].thought_signature' (TYPE_BYTES), Base64 decoding failed for "#!"`},
		{"signature not issued", `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"AAAA"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`, "Corrupted thought signature."},
		{"dummy signature", `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"skip_thought_signature_validator"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`, ""},
		{"bad function name", hi + `,"tools":[{"functionDeclarations":[{"name":"get weather"},{"name":"ok.name:v-1"}]}]}`, "* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64.\n"},
		{"function name too long", hi + `,"tools":[{"functionDeclarations":[{"name":"` + strings.Repeat("a", 65) + `"}]}]}`, "* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64.\n"},
		{"unknown declaration field", hi + `,"tools":[{"functionDeclarations":[{"name":"f","params":{}}]}]}`, `Invalid JSON payload received. Unknown name "params" at 'tools[0].function_declarations[0]': Cannot find field.`},
		{"thinking budget not a number", hi + `,"generationConfig":{"thinkingConfig":{"thinkingBudget":"lots"}}}`, `Invalid value at 'generation_config.thinking_config.thinking_budget' (TYPE_INT32), "lots"`},
		{"thinking level unknown", hi + `,"generationConfig":{"thinkingConfig":{"thinkingLevel":"ULTRA"}}}`, `Invalid value at 'generation_config.thinking_config.thinking_level' (type.googleapis.com/google.ai.generativelanguage.v1beta.ThinkingConfig.ThinkingLevel), "ULTRA"`},
		{"response MIME type", hi + `,"generationConfig":{"responseMimeType":"text/html"}}`, "* GenerateContentRequest.generation_config.response_mime_type: allowed mimetypes are `text/plain`, `application/json`, `application/xml`, `application/yaml` and `text/x.enum`.\n"},
		{"thinking config", hi + `,"generationConfig":{"thinkingConfig":{"thinkingBudget":-1,"includeThoughts":true}}}`, ""},
		{"thinking level", hi + `,"generationConfig":{"thinkingConfig":{"thinkingLevel":"high"},"responseMimeType":"application/json","responseJsonSchema":{"type":"object"}}}`, ""},
		{"snake_case", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"system_instruction":{"parts":[{"text":"Be brief."}]},"generation_config":{"thinking_config":{"thinking_budget":"1024","include_thoughts":true}}}`, ""},
		{"role left out", `{"contents":[{"parts":[{"text":"hi"}]}]}`, ""},
	} {
		if tc.msg == "" {
			srv.Add(geminitest.Reply{Text: "ok"})
		}
		code, body := post(t, url, tc.body, key)
		if tc.msg == "" {
			if code != 200 {
				t.Errorf("%s: %d %s", tc.name, code, body)
			}
			continue
		}
		c, status, msg := errorOf(t, body)
		if code != 400 || c != 400 || status != "INVALID_ARGUMENT" || msg != tc.msg {
			t.Errorf("%s: %d %d %s %q, want 400 INVALID_ARGUMENT %q", tc.name, code, c, status, msg, tc.msg)
		}
	}

	// The API key: required, as a header or as the key parameter.
	code, body := post(t, url, hi+`}`, nil)
	c, status, msg := errorOf(t, body)
	if code != 403 || c != 403 || status != "PERMISSION_DENIED" || !strings.HasPrefix(msg, "Method doesn't allow unregistered callers") {
		t.Errorf("no key: %d %s", code, body)
	}
	srv.Add(geminitest.Reply{Text: "ok"})
	if code, body := post(t, url+"?key=k", hi+`}`, nil); code != 200 {
		t.Errorf("key parameter: %d %s", code, body)
	}
	if code, body := post(t, srv.URL+"/v1beta/models/"+model+":countTokens", hi+`}`, key); code != 404 {
		t.Errorf("another method: %d %s", code, body)
	}
}

// TestNoKey: through genai too, a request without a key is refused.
func TestNoKey(t *testing.T) {
	srv := geminitest.New(t, geminitest.Reply{Text: "ok"})
	clearEnv(t)
	// genai always sends the configured key: a client that sends none is
	// one whose transport drops it.
	hc := &http.Client{Transport: dropKey{http.DefaultTransport}}
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: "k", Backend: genai.BackendGeminiAPI, HTTPClient: hc, HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Models.GenerateContent(context.Background(), model, genai.Text("hi"), nil)
	e := apiError(t, err, 403, "PERMISSION_DENIED")
	if e.Message != "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API." {
		t.Errorf("message %q", e.Message)
	}
}

type dropKey struct{ rt http.RoundTripper }

func (d dropKey) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del("x-goog-api-key")
	return d.rt.RoundTrip(r)
}

// TestErrors: the scripted errors reach genai as the API's.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	srv := geminitest.New(t,
		geminitest.ResourceExhausted(), geminitest.Unavailable(), geminitest.Internal(), geminitest.TooManyTokens(1200000, 1048576),
		geminitest.Reply{Status: 429, Body: `{"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}}`, Header: map[string]string{"Retry-After": "1"}},
	)
	c := newClient(t, srv)
	call := func() error {
		_, err := c.Models.GenerateContent(ctx, model, genai.Text("hi"), nil)
		return err
	}
	if e := apiError(t, call(), 429, "RESOURCE_EXHAUSTED"); !strings.HasPrefix(e.Message, "You exceeded your current quota") || len(e.Details) != 3 {
		t.Errorf("429: %q, %d details", e.Message, len(e.Details))
	}
	if e := apiError(t, call(), 503, "UNAVAILABLE"); e.Message != "The model is overloaded. Please try again later." {
		t.Errorf("503: %q", e.Message)
	}
	apiError(t, call(), 500, "INTERNAL")
	if e := apiError(t, call(), 400, "INVALID_ARGUMENT"); e.Message != "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)." {
		t.Errorf("too many tokens: %q", e.Message)
	}
	apiError(t, call(), 429, "RESOURCE_EXHAUSTED")
	if e := apiError(t, call(), 400, "INVALID_ARGUMENT"); e.Message != "geminitest: script exhausted" {
		t.Errorf("past the script: %q", e.Message)
	}
	// A stream's error comes from its first iteration.
	for _, err := range c.Models.GenerateContentStream(ctx, model, genai.Text("hi"), nil) {
		apiError(t, err, 400, "INVALID_ARGUMENT")
		break
	}
}

// TestCut: a cut stream ends without error and without a finishReason,
// and without the calls, which come on the last chunk.
func TestCut(t *testing.T) {
	ctx := context.Background()
	srv := geminitest.New(t,
		geminitest.Reply{Text: "This answer is cut short.", Cut: true},
		geminitest.Reply{Text: "Calling.", ToolCalls: []geminitest.Call{{Name: "f"}}, Cut: true},
	)
	c := newClient(t, srv)
	for i := range 2 {
		var text strings.Builder
		n := 0
		for resp, err := range c.Models.GenerateContentStream(ctx, model, genai.Text("hi"), nil) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if f := resp.Candidates[0].FinishReason; f != "" {
				t.Errorf("reply %d: finishReason %q in a cut stream", i, f)
			}
			if len(resp.FunctionCalls()) > 0 {
				t.Errorf("reply %d: calls in a cut stream", i)
			}
			text.WriteString(resp.Text())
		}
		if n == 0 || text.Len() == 0 {
			t.Errorf("reply %d: %d chunks, text %q", i, n, text.String())
		}
	}
}

// TestStall: a stalled stream sends its first chunk and then nothing;
// the client going away closes Gone. Started and Hold hold an answer.
func TestStall(t *testing.T) {
	gone, started, hold := make(chan struct{}), make(chan struct{}), make(chan struct{})
	srv := geminitest.New(t,
		geminitest.Reply{Text: "one two three", Stall: true, Gone: gone},
		geminitest.Reply{Text: "held", Started: started, Hold: hold},
	)
	c := newClient(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for resp, err := range c.Models.GenerateContentStream(ctx, model, genai.Text("hi"), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Text(); got == "" || got == "one two three" || !strings.HasPrefix("one two three", got) || resp.Candidates[0].FinishReason != "" {
			t.Errorf("first chunk: %q, finishReason %q", resp.Text(), resp.Candidates[0].FinishReason)
		}
		break // leave
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("Gone not closed after the client left")
	}

	done := make(chan string)
	go func() {
		resp, err := c.Models.GenerateContent(context.Background(), model, genai.Text("hi"), nil)
		if err != nil {
			t.Error(err)
			done <- ""
			return
		}
		done <- resp.Text()
	}()
	<-started
	select {
	case <-done:
		t.Fatal("answered during Hold")
	case <-time.After(20 * time.Millisecond):
	}
	close(hold)
	if got := <-done; got != "held" {
		t.Errorf("text = %q", got)
	}
}

// TestWire: the bytes of a stream and of a response, as the API writes
// them.
func TestWire(t *testing.T) {
	srv := geminitest.New(t,
		geminitest.Reply{Text: "abc def", ToolCalls: []geminitest.Call{{ID: "c1", Name: "f", Args: `{"x":1}`}}, Signatures: true},
		geminitest.Reply{Text: "abc"},
		geminitest.Reply{Text: "abc def ghi"},
	)
	key := map[string]string{"x-goog-api-key": "k"}
	body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1beta/models/"+model+":streamGenerateContent?alt=sse", strings.NewReader(body))
	req.Header.Set("x-goog-api-key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	events := strings.Split(strings.TrimSuffix(string(raw), "\r\n\r\n"), "\r\n\r\n")
	if len(events) != 4 {
		t.Fatalf("%d events:\n%s", len(events), raw)
	}
	for i, ev := range events {
		data, ok := strings.CutPrefix(ev, "data: ")
		var m map[string]any
		if !ok || json.Unmarshal([]byte(data), &m) != nil {
			t.Fatalf("event %d: %q", i, ev)
		}
	}
	last := events[3]
	for _, want := range []string{`"functionCall":{"id":"c1","name":"f","args":{"x":1}}`, `"thoughtSignature":"` + base64.StdEncoding.EncodeToString(srv.Signatures()[0]) + `"`, `"finishReason":"STOP"`, `"candidatesTokenCount":5`, `"role":"model"`} {
		if !strings.Contains(last, want) {
			t.Errorf("last event lacks %s:\n%s", want, last)
		}
	}
	if strings.Contains(events[0], "finishReason") || strings.Contains(events[0], "candidatesTokenCount") {
		t.Errorf("first event has the end's fields:\n%s", events[0])
	}

	code, one := post(t, srv.URL+"/v1beta/models/"+model+":generateContent", body, key)
	var r struct {
		Candidates []struct {
			Content struct {
				Parts []map[string]any `json:"parts"`
				Role  string           `json:"role"`
			} `json:"content"`
			FinishReason string `json:"finishReason"`
			Index        *int   `json:"index"`
		} `json:"candidates"`
		UsageMetadata map[string]any `json:"usageMetadata"`
		ModelVersion  string         `json:"modelVersion"`
		ResponseID    string         `json:"responseId"`
	}
	if code != 200 || json.Unmarshal([]byte(one), &r) != nil || len(r.Candidates) != 1 {
		t.Fatalf("%d %s", code, one)
	}
	cand := r.Candidates[0]
	if cand.Index == nil || *cand.Index != 0 || cand.Content.Role != "model" || cand.Content.Parts[0]["text"] != "abc" || cand.FinishReason != "STOP" {
		t.Errorf("candidate: %s", one)
	}
	if u := r.UsageMetadata; u["promptTokenCount"] != 10.0 || u["candidatesTokenCount"] != 5.0 || u["totalTokenCount"] != 15.0 {
		t.Errorf("usage: %s", one)
	}
	if r.ModelVersion != model || r.ResponseID == "" {
		t.Errorf("modelVersion, responseId: %s", one)
	}

	// Without alt=sse, a stream is a JSON array.
	code, arr := post(t, srv.URL+"/v1beta/models/"+model+":streamGenerateContent", body, key)
	var chunks []map[string]any
	if code != 200 || json.Unmarshal([]byte(arr), &chunks) != nil || len(chunks) != 3 {
		t.Errorf("JSON stream: %d %s", code, arr)
	}
}

// TestConcurrent: requests at once each get one reply, and all are
// recorded.
func TestConcurrent(t *testing.T) {
	const n = 8
	srv := geminitest.New(t)
	for range n {
		srv.Add(geminitest.Reply{Text: "ok"})
	}
	c := newClient(t, srv)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := c.Models.GenerateContent(context.Background(), model, genai.Text("hi"), nil)
			if err != nil || resp.Text() != "ok" {
				t.Errorf("%v %v", resp, err)
			}
		})
	}
	wg.Wait()
	if got := len(srv.Requests()); got != n {
		t.Errorf("%d requests recorded, want %d", got, n)
	}
}
