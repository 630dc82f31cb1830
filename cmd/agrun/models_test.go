package main

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/providertest"
)

// modelEnv is a test env whose [llm] speaks api to a fake server of that
// API, with reasoning on and the key modelSecret in $AGRUN_TEST_MODEL_KEY
// (set for the whole package by TestMain, so that these tests can be
// parallel).
func modelEnv(t *testing.T, api string, steps ...providertest.Step) (*testEnv, providertest.Fake) {
	t.Helper()
	kit, ok := providertest.Kits[api]
	if !ok {
		t.Fatalf("no kit for %s", api)
	}
	f := kit.Serve(t, steps...)
	e := newTestEnv(t, f.URL(), "")
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg = []byte(strings.Replace(string(cfg), "[llm]\n", "[llm]\napi = \""+api+"\"\nreasoning = \"medium\"\n", 1))
	cfg = []byte(strings.Replace(string(cfg), `api_key_env = "AGRUN_TEST_KEY"`, `api_key_env = "`+modelKeyEnv+`"`, 1))
	if err := os.WriteFile(e.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return e, f
}

// modelSecret is the model-API tests' key, in $modelKeyEnv.
const (
	modelSecret = "sk-e2e-do-not-print"
	modelKeyEnv = "AGRUN_TEST_MODEL_KEY"
)

// apis are the [llm] api values, sorted.
func apis() []string {
	var out []string
	for api := range providertest.Kits {
		out = append(out, api)
	}
	sort.Strings(out)
	return out
}

// noSecret fails if the key shows anywhere a user or a file could see it.
func noSecret(t *testing.T, e *testEnv, r result) {
	t.Helper()
	if strings.Contains(r.stdout+r.stderr, modelSecret) {
		t.Errorf("the key was printed: %s %s", r.stdout, r.stderr)
	}
	filepath.Walk(e.dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), modelSecret) {
				t.Errorf("the key is in %s", p)
			}
		}
		return nil
	})
}

var countSteps = []providertest.Step{
	{Reasoning: "Counting needs the tool.", Calls: []providertest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"a b c"}`}},
		Usage: &providertest.Usage{Input: 500, Output: 40, Cached: 300, Reasoning: 20}},
	{Reasoning: "It said three.", Text: "Three words.", Usage: &providertest.Usage{Input: 600, Output: 10, Cached: 500}},
}

// Each API end to end through agrun run: a streamed tool round trip with
// reasoning hidden (and kept for the next turn, which the fake server
// refuses without it), the session continued, --show-reasoning, --json
// events with usage, the key in the API's own header and printed
// nowhere, and a 400 ending the run with exit 1 and kind provider.
func TestRunEveryAPI(t *testing.T) {
	t.Parallel()
	for _, api := range apis() {
		t.Run(api, func(t *testing.T) {
			kit := providertest.Kits[api]
			steps := append(append([]providertest.Step{}, countSteps...),
				providertest.Step{Text: "Still three."},
				providertest.Step{Reasoning: "Again.", Calls: []providertest.Call{{ID: "call_2", Name: "word_count", Args: `{"text":"x y"}`}}},
				providertest.Step{Text: "Two."},
				providertest.Step{Fail: "400"},
			)
			e, f := modelEnv(t, api, steps...)
			r := e.run("", "run", "--session", "m1", "How many words in 'a b c'?").wantCode(t, exitOK)
			if r.stdout != "Three words.\n" || strings.Contains(r.stderr, "Counting") {
				t.Errorf("run: stdout %q stderr %q", r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, "2 requests, 1 tool call, 1150 tokens (1100 prompt, 800 cached, 50 completion, 20 reasoning)") {
				t.Errorf("summary line: %q", r.stderr)
			}
			if got := f.Header(0).Get(kit.KeyHeader); got != kit.KeyValue(modelSecret) {
				t.Errorf("%s: %q", kit.KeyHeader, got)
			}
			noSecret(t, e, r)

			r = e.run("", "run", "--session", "m1", "Sure?").wantCode(t, exitOK)
			if r.stdout != "Still three.\n" {
				t.Errorf("the session did not continue: %q %q", r.stdout, r.stderr)
			}
			if b := string(f.Body(2)); !strings.Contains(b, "Three words.") || !strings.Contains(b, "a b c") {
				t.Errorf("the continued request lacks the session: %s", b)
			}

			r = e.run("", "run", "--json", "--show-reasoning", "Count 'x y'").wantCode(t, exitOK)
			evs := jsonEvents(t, r.stdout)
			if len(ofType(evs, "reasoning_delta")) == 0 || len(ofType(evs, "tool_completed")) != 1 || len(ofType(evs, "turn_complete")) != 2 {
				t.Errorf("--json events: %s", r.stdout)
			}
			if done := ofType(evs, "done"); len(done) != 1 || done[0]["text"] != "Two." || done[0]["session"] == "" {
				t.Errorf("done: %v", done)
			}
			var reasoning strings.Builder
			for _, ev := range ofType(evs, "reasoning_delta") {
				reasoning.WriteString(ev["text"].(string))
			}
			if reasoning.String() != "Again." {
				t.Errorf("reasoning events: %q", reasoning.String())
			}

			r = e.run("", "run", "--json", "hi").wantCode(t, exitFailure)
			evs = jsonEvents(t, r.stdout)
			if last := evs[len(evs)-1]; last["type"] != "error" || last["kind"] != "provider" {
				t.Errorf("a 400: %s", r.stdout)
			}
			noSecret(t, e, r)
		})
	}
}

// Each API through agrun chat (a tool round trip, then the next line of
// the same session) and through agrun serve's POST /v1/runs.
func TestChatAndServeEveryAPI(t *testing.T) {
	t.Parallel()
	for _, api := range apis() {
		t.Run(api, func(t *testing.T) {
			steps := append(append([]providertest.Step{}, countSteps...), providertest.Step{Text: "Yes, three."})
			e, _ := modelEnv(t, api, steps...)
			r := e.run("How many words in 'a b c'?\nSure?\n/exit\n", "chat", "--session", "c1").wantCode(t, exitOK)
			if !strings.Contains(r.stdout, "Three words.") || !strings.Contains(r.stdout, "Yes, three.") || strings.Contains(r.stdout+r.stderr, "Counting") {
				t.Errorf("chat: stdout %q stderr %q", r.stdout, r.stderr)
			}
			noSecret(t, e, r)

			e1, _ := modelEnv(t, api, countSteps...)
			r = e1.run("", "run", "--show-reasoning", "How many words in 'a b c'?").wantCode(t, exitOK)
			if !strings.Contains(r.stderr, "Counting needs the tool.") || !strings.Contains(r.stderr, "It said three.") || r.stdout != "Three words.\n" {
				t.Errorf("--show-reasoning: stdout %q stderr %q", r.stdout, r.stderr)
			}

			e2, _ := modelEnv(t, api, countSteps...)
			base := startServe(t, e2)
			resp, err := http.Post(base+"/v1/runs", "application/json", strings.NewReader(`{"prompt":"How many words in 'a b c'?","session":"s1"}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var types []string
			var last string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
					types = append(types, v)
				} else if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					last = v
				}
			}
			got := strings.Join(types, ",")
			if !strings.Contains(got, "tool_completed") || !strings.HasSuffix(got, "done") || !strings.Contains(last, `"text":"Three words."`) {
				t.Errorf("serve run: events %s, last %s", got, last)
			}
		})
	}
}

// A session continued with another api keeps its text and tool calls and
// drops the reasoning of the earlier replies (another API refuses a
// signature it did not make, some refuse fields they do not know); a
// session written before reasoning was kept continues as it was.
func TestSessionAcrossAPIs(t *testing.T) {
	t.Parallel()
	e, _ := modelEnv(t, "anthropic", countSteps...)
	e.run("", "run", "--session", "x1", "How many words in 'a b c'?").wantCode(t, exitOK)
	if s := e.sessionFile("x1"); !strings.Contains(s, `"api":"anthropic"`) || !strings.Contains(s, `"signature"`) {
		t.Fatalf("the anthropic reasoning was not kept: %s", s)
	}
	for _, api := range []string{"gemini", "chat", "responses"} {
		f := providertest.Kits[api].Serve(t, providertest.Step{Text: "Still three."})
		cfg, _ := os.ReadFile(e.config)
		next := regexpReplace(string(cfg), `(?m)^api = .*$`, `api = "`+api+`"`)
		next = regexpReplace(next, `(?m)^base_url = .*$`, `base_url = "`+f.URL()+`"`)
		os.WriteFile(e.config, []byte(next), 0o644)
		r := e.run("", "run", "--session", "x1", "Sure?").wantCode(t, exitOK)
		if r.stdout != "Still three.\n" {
			t.Errorf("%s: %q %q", api, r.stdout, r.stderr)
		}
		b := string(f.Body(0))
		if strings.Contains(b, "Counting needs the tool") || strings.Contains(b, "signature") || !strings.Contains(b, "Three words.") || !strings.Contains(b, "word_count") {
			t.Errorf("%s: the request carries another API's reasoning, or lacks the conversation: %s", api, b)
		}
	}

	// A session file of an older agrun: no reasoning anywhere.
	old := `{"time":"2026-01-01T00:00:00Z","message":{"role":"user","content":"How many words in 'a b c'?"}}
{"time":"2026-01-01T00:00:01Z","message":{"role":"assistant","tool_calls":[{"id":"call_1","name":"word_count","arguments":"{\"text\":\"a b c\"}"}]}}
{"time":"2026-01-01T00:00:02Z","message":{"role":"tool","content":"{\"words\":3}","tool_call_id":"call_1","name":"word_count"}}
{"time":"2026-01-01T00:00:03Z","message":{"role":"assistant","content":"Three words."}}
`
	for _, api := range apis() {
		e, f := modelEnv(t, api, providertest.Step{Text: "Still three."})
		os.WriteFile(filepath.Join(e.dir, "sessions", "old.jsonl"), []byte(old), 0o644)
		if r := e.run("", "run", "--session", "old", "Sure?").wantCode(t, exitOK); r.stdout != "Still three.\n" {
			t.Errorf("%s: an old session did not continue: %q %q", api, r.stdout, r.stderr)
		}
		if b := string(f.Body(0)); !strings.Contains(b, "Three words.") {
			t.Errorf("%s: %s", api, b)
		}
	}
}

func regexpReplace(s, re, repl string) string {
	return regexp.MustCompile(re).ReplaceAllString(s, repl)
}
