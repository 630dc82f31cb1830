package cluster

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// offeredTools names the tools a model request offered.
func offeredTools(r chattest.Request) []string {
	var names []string
	for _, tl := range r.Tools {
		names = append(names, tl.Function.Name)
	}
	slices.Sort(names)
	return names
}

// TestRunSettingsWithinTheWorkersConfig (issue 28, 5): a run's own
// settings reach its model steps on a real Temporal server and worker —
// the model asked for (one of the worker's Models), the system prompt, a
// tool filter, lower budgets — and a run started by hand with wider ones
// is held to the worker's config: a tool filter naming a tool the worker
// lacks offers only what it has, a budget over the worker's is the
// worker's, a model the worker does not allow ends the run
// (permission_denied) without a model request, and max_turns over the
// worker's is the worker's.
func TestRunSettingsWithinTheWorkersConfig(t *testing.T) {
	addr := devtemporal.Start(t)
	srv := chattest.New(t,
		// run 1: narrow settings, applied.
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "a", Args: `{}`}}},
		chattest.Reply{Text: "one"},
		// run 2: wider than the worker: its budget of 1 call holds (the
		// second call asked for ends the run).
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c2", Name: "a", Args: `{}`}}},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c3", Name: "a", Args: `{}`}}},
		// run s5: the one turn of its worker's max_turns.
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c4", Name: "a", Args: `{}`}}},
	)
	tool := func(name string) *fakeTool {
		return &fakeTool{name: name, source: "wasm", perms: []permission.Permission{permission.Read}}
	}
	a, st := newActivities(t, srv, tool("a"), tool("b"), tool("c"))
	a.Loop.MaxToolCalls = 1 // the worker's budget
	a.Loop.System = "the worker's system prompt"
	other, err := chat.New(chat.Config{BaseURL: srv.URL, Model: "other-model", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	a.Models = map[string]loop.Provider{"other-model": other}
	tc := devtemporal.Client(t, addr)
	q := QueuesFor("settings-")
	ctx, cancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	go func() { werr <- RunWorker(ctx, tc, a, WorkerOptions{Queues: q}) }()
	defer func() {
		cancel()
		if err := <-werr; err != nil {
			t.Error(err)
		}
	}()
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	run := func(id string, s *RunSettings) RunResult {
		t.Helper()
		cl := &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: RunInput{Queues: q, Settings: s}}
		res, err := cl.Run(rctx, id, "go")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	sys := "the run's system prompt"
	res := run("s1", &RunSettings{Model: "other-model", System: &sys, Tools: []string{"a", "c"}, MaxToolCalls: 5})
	if res.ErrorKind != "" || res.Turns != 2 {
		t.Fatalf("run 1: %+v", res)
	}
	reqs := srv.Requests()
	for i, r := range reqs {
		if r.Model != "other-model" || firstText(r) != sys {
			t.Errorf("run 1, request %d: model %q, first message %q", i, r.Model, firstText(r))
		}
		if got := offeredTools(r); strings.Join(got, ",") != "a,c" {
			t.Errorf("run 1, request %d offered %v, want a,c", i, got)
		}
	}

	// A workflow started by hand, wider than the worker: a tool it does
	// not have, a budget of 100 calls.
	in := RunInput{Session: "s2", Prompt: "go", Queues: q, Settings: &RunSettings{Tools: []string{"a", "not-on-this-worker"}, MaxToolCalls: 100}}
	wr, err := tc.ExecuteWorkflow(rctx, client.StartWorkflowOptions{ID: WorkflowID("s2"), TaskQueue: q.Sessions}, WorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.Get(rctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.ErrorKind != string(loop.KindMaxToolCalls) {
		t.Fatalf("run 2 (100 calls asked, the worker allows 1): %+v", res)
	}
	reqs = srv.Requests()
	if len(reqs) != 4 || strings.Join(offeredTools(reqs[3]), ",") != "a" || firstText(reqs[3]) != a.Loop.System || reqs[3].Model != "m" {
		t.Fatalf("run 2: %d requests; offered %v, system %q", len(reqs), offeredTools(reqs[len(reqs)-1]), firstText(reqs[len(reqs)-1]))
	}

	// A run asking for more turns than its worker's max_turns (1, on a
	// worker of queues of its own): the worker's holds (the second
	// request is not made).
	a1, _ := newActivities(t, srv, tool("a"))
	a1.Sessions, a1.Loop.MaxTurns = st, 1
	q1 := QueuesFor("turns-")
	ctx1, cancel1 := context.WithCancel(context.Background())
	werr1 := make(chan error, 1)
	go func() { werr1 <- RunWorker(ctx1, tc, a1, WorkerOptions{Queues: q1}) }()
	defer func() {
		cancel1()
		if err := <-werr1; err != nil {
			t.Error(err)
		}
	}()
	in = RunInput{Session: "s5", Prompt: "go", Queues: q1, MaxTurns: 100}
	wr, err = tc.ExecuteWorkflow(rctx, client.StartWorkflowOptions{ID: WorkflowID("s5"), TaskQueue: q1.Sessions}, WorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.Get(rctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.ErrorKind != string(loop.KindMaxTurns) || len(srv.Requests()) != 5 {
		t.Fatalf("run of 100 turns on a worker allowing 1: %+v, %d requests", res, len(srv.Requests()))
	}

	// A model the worker does not allow: refused before any request.
	res = run("s3", &RunSettings{Model: "expensive-model"})
	if res.ErrorKind != string(registry.PermissionDenied) || !strings.Contains(res.Error, `model "expensive-model" is not allowed`) {
		t.Fatalf("run 3: %+v", res)
	}
	if n := len(srv.Requests()); n != 5 {
		t.Fatalf("a refused model made %d more requests", n-5)
	}
	if _, err := st.Load(rctx, "s3", 0); err == nil {
		t.Error("a refused run stored records")
	} else if !strings.Contains(err.Error(), session.ErrNotFound.Error()) {
		t.Error(err)
	}

	// Settings over the caps are refused before the start.
	huge := strings.Repeat("x", MaxSettingBytes+1)
	cl := &Client{Temporal: tc, Sessions: st, Defaults: RunInput{Queues: q, Settings: &RunSettings{System: &huge}}}
	if _, _, err := cl.Start(rctx, "s4", "go"); err == nil || !strings.Contains(err.Error(), "over 65536") {
		t.Fatalf("a system prompt over the cap: %v", err)
	}
}

// firstText is the text of a request's first message (the system prompt).
func firstText(r chattest.Request) string {
	if len(r.Messages) == 0 || r.Messages[0].Content == nil {
		return ""
	}
	return *r.Messages[0].Content
}

// TestForgedCountersAreRefused: a model step whose input claims a negative
// seq fails for good, and one whose input claims negative
// counters (a workflow started by hand: the input is the starter's) would
// have lifted the worker's max_turns and budgets, which subtract from
// them; it ends the run, permission_denied, without a model request —
// and a step at the limit ends it as spent.
func TestForgedCountersAreRefused(t *testing.T) {
	step := func(t *testing.T, in ModelStep, set func(*Activities)) (ModelOutput, int) {
		srv := chattest.New(t, chattest.Reply{Text: "answered"})
		a, _ := newActivities(t, srv)
		set(a)
		env := quietSuite().NewTestActivityEnvironment()
		env.RegisterActivityWithOptions(a.Model, activity.RegisterOptions{Name: ModelActivity})
		v, err := env.ExecuteActivity(ModelActivity, in)
		if err != nil {
			t.Fatal(err)
		}
		var out ModelOutput
		if err := v.Get(&out); err != nil {
			t.Fatal(err)
		}
		return out, len(srv.Requests())
	}
	env := quietSuite().NewTestActivityEnvironment()
	a, _ := newActivities(t, chattest.New(t))
	env.RegisterActivityWithOptions(a.Model, activity.RegisterOptions{Name: ModelActivity})
	if _, err := env.ExecuteActivity(ModelActivity, ModelStep{Session: "s", Prompt: "hi", Seq: -1, Final: true}); err == nil || !strings.Contains(err.Error(), "seq -1 is negative") {
		t.Fatalf("a negative seq: %v", err)
	}
	for _, c := range []struct {
		name          string
		set           func(*Activities)
		spent, forged ModelStep
	}{
		{"max_turns", func(a *Activities) { a.Loop.MaxTurns = 2 },
			ModelStep{Session: "s", Prompt: "hi", Turns: 2}, ModelStep{Session: "s", Prompt: "hi", Turns: -1 << 30}},
		{"max_total_tokens", func(a *Activities) { a.Loop.MaxTotalTokens = 100 },
			ModelStep{Session: "s", Prompt: "hi", UsedTokens: 100}, ModelStep{Session: "s", Prompt: "hi", UsedTokens: -1 << 40}},
		{"max_tool_calls", func(a *Activities) { a.Loop.MaxToolCalls = 1 },
			ModelStep{Session: "s", Prompt: "hi", UsedCalls: 1}, ModelStep{Session: "s", Prompt: "hi", UsedCalls: -1 << 30}},
		{"results beyond the calls", func(a *Activities) { a.Loop.MaxToolCalls = 1 },
			ModelStep{Session: "s", Prompt: "hi", UsedCalls: 1}, ModelStep{Session: "s", Prompt: "hi", UsedCalls: 0, Results: []ToolResult{{ID: "x"}, {ID: "y"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if out, n := step(t, c.spent, c.set); n != 0 || out.ErrorKind == "" {
				t.Fatalf("at the limit: %d model requests, kind %q", n, out.ErrorKind)
			}
			out, n := step(t, c.forged, c.set)
			if n != 0 || out.ErrorKind != string(registry.PermissionDenied) || !strings.Contains(out.Error, "not valid") {
				t.Fatalf("forged counters: %d model requests, %+v", n, out)
			}
		})
	}
}

// TestSettingsSchemaMustCompile: a run's schema that does not compile is
// refused by Check (Client.Start and the worker's step alike), its
// message cleaned and capped, not left to fail the step later.
func TestSettingsSchemaMustCompile(t *testing.T) {
	s := &RunSettings{Schema: []byte(`{"type":"object","properties":{"a":{"type":"nope","pattern":"\u001b[31m"}}}`)}
	err := s.Check()
	if err == nil || !strings.HasPrefix(err.Error(), "the schema: ") || strings.ContainsRune(err.Error(), 0x1b) || len(err.Error()) > 600 {
		t.Fatalf("a schema that does not compile: %v", err)
	}
	if err := (&RunSettings{Schema: []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`)}).Check(); err != nil {
		t.Fatalf("a good schema: %v", err)
	}
}
