package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/store"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/testprovider"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// --- test doubles: records as JSON ---

type jsonRecords struct{}

func (jsonRecords) Message(m loop.Message) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"message": m})
}
func (jsonRecords) Request(ri loop.RequestInfo) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"request": ri})
}
func (jsonRecords) Call(ev *loop.ToolExecutionCompleted) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"call": map[string]any{"id": ev.ID, "tool": ev.Name, "error_kind": ev.ErrorKind}})
}
func (jsonRecords) Decision(d loop.DecisionRecord) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"decision": d})
}
func (jsonRecords) Approved(recs []json.RawMessage) map[string]bool {
	ok := map[string]bool{}
	for _, r := range recs {
		var v struct {
			Decision *loop.DecisionRecord `json:"decision"`
		}
		if json.Unmarshal(r, &v) == nil && v.Decision != nil && v.Decision.Answer.Approved() {
			ok[v.Decision.CallID] = true
		}
	}
	return ok
}
func (jsonRecords) History(recs []json.RawMessage) ([]loop.Message, error) {
	var h []loop.Message
	for _, r := range recs {
		var v struct {
			Message *loop.Message `json:"message"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, err
		}
		if v.Message != nil {
			h = append(h, *v.Message)
		}
	}
	return h, nil
}

// kindOfRecords counts the records by kind ("message", "request", "call").
func kindOfRecords(t *testing.T, recs []json.RawMessage) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, r := range recs {
		var v map[string]json.RawMessage
		if err := json.Unmarshal(r, &v); err != nil {
			t.Fatal(err)
		}
		for k := range v {
			n[k]++
		}
	}
	return n
}

// fakeTool is a registry tool that says which source it is (for queue
// routing) and records the task queue it ran on.
type fakeTool struct {
	name, source string
	perms        []permission.Permission
	hints        []string
	run          func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
	queues       *sync.Map // tool name -> task queue
}

func (f *fakeTool) Name() string                         { return f.name }
func (f *fakeTool) Description() string                  { return f.name }
func (f *fakeTool) Parameters() json.RawMessage          { return json.RawMessage(`{"type":"object"}`) }
func (f *fakeTool) Permissions() []permission.Permission { return f.perms }
func (f *fakeTool) Grant() registry.Grant {
	return registry.Grant{Source: f.source, Permissions: f.perms, Hints: f.hints, Timeout: 5 * time.Second}
}
func (f *fakeTool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	if f.queues != nil {
		q := activity.GetInfo(ctx).TaskQueue
		if activity.GetInfo(ctx).IsLocalActivity {
			q += " (local)"
		}
		f.queues.Store(f.name, q)
	}
	if f.run != nil {
		return f.run(ctx, args)
	}
	return json.RawMessage(`{"tool":"` + f.name + `"}`), nil
}

func newActivities(t testing.TB, srv *chattest.Server, tools ...registry.Tool) (*Activities, *session.Mem) {
	t.Helper()
	reg := registry.New()
	for _, tl := range tools {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	st := &session.Mem{}
	objs, err := store.NewDirObjects(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &Activities{
		Registry: reg,
		Loop:     loop.Config{Provider: testprovider.Chat(t, srv.URL), Limits: loop.Limits{MaxRetries: -1}},
		Sessions: st,
		Blobs:    objs,
		Records:  jsonRecords{},
	}, st
}

// quietSuite is a test suite that logs nothing (the SDK's default test
// logger writes every activity result).
func quietSuite() *testsuite.WorkflowTestSuite {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	return &s
}

func newEnv(t *testing.T, a *Activities) *testsuite.TestWorkflowEnvironment {
	return newEnvServing(t, a, nil)
}

// newEnvServing is newEnv whose workflow worker serves the queues in
// serves (WorkerOptions.Serve names), running their calls as local
// activities, that many at once.
func newEnvServing(t *testing.T, a *Activities, serves map[string]int) *testsuite.TestWorkflowEnvironment {
	s := quietSuite()
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(SessionWorkflow, workflow.RegisterOptions{Name: WorkflowName})
	if a != nil {
		env.RegisterActivityWithOptions(a.Seq, activity.RegisterOptions{Name: SeqActivity})
		env.RegisterActivityWithOptions(a.Model, activity.RegisterOptions{Name: ModelActivity})
		env.RegisterActivityWithOptions(a.Tool, activity.RegisterOptions{Name: ToolActivity})
		env.RegisterActivityWithOptions(a.Decide, activity.RegisterOptions{Name: DecideActivity})
		// newEnv's workflow worker serves no tool queue: every call is
		// an activity task on its queue (TestLocalCalls runs them local).
		env.RegisterActivityWithOptions(a.localTool(serves), activity.RegisterOptions{Name: LocalToolActivity})
	} else {
		// The doubles' sessions are empty: a run begins at 0.
		env.RegisterActivityWithOptions(func(context.Context, string) (int64, error) { return 0, nil }, activity.RegisterOptions{Name: SeqActivity})
		env.RegisterActivityWithOptions(func(context.Context, ToolStep) (localCall, error) { return localCall{}, nil }, activity.RegisterOptions{Name: LocalToolActivity})
	}
	env.SetTestTimeout(time.Minute)
	return env
}

// TestWorkflowParallelCallsInOrderOnTheirQueues runs a session through the
// workflow with the real activities (a scripted model, a registry, stores
// in memory): the reply's two calls run as parallel activities, each on
// its tool's queue (wasm, mcp); the slower first call's result still comes
// first in the next request; the session store holds the transcript
// (messages, one request record per model request, one call record per
// call) in the order the local path writes it.
func TestWorkflowParallelCallsInOrderOnTheirQueues(t *testing.T) {
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "slow", Args: `{}`}, {ID: "c2", Name: "fast", Args: `{}`}}},
		chattest.Reply{Text: "done", Check: func(t testing.TB, r chattest.Request) {
			var ids []string
			for _, m := range r.Messages {
				if m.Role == "tool" {
					ids = append(ids, m.ToolCallID+"="+*m.Content)
				}
			}
			if strings.Join(ids, ",") != `c1={"tool":"slow"},c2={"tool":"fast"}` {
				t.Errorf("tool messages %v", ids)
			}
		}},
	)
	var queues sync.Map
	var fastDone atomic.Bool
	slow := &fakeTool{name: "slow", source: "wasm", perms: []permission.Permission{permission.Read}, queues: &queues,
		run: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			deadline := time.Now().Add(5 * time.Second)
			for !fastDone.Load() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if !fastDone.Load() {
				return nil, errors.New("the calls did not run in parallel")
			}
			return json.RawMessage(`{"tool":"slow"}`), nil
		}}
	fast := &fakeTool{name: "fast", source: "mcp", hints: []string{"read_only"}, queues: &queues,
		run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			fastDone.Store(true)
			return json.RawMessage(`{"tool":"fast"}`), nil
		}}
	a, st := newActivities(t, srv, slow, fast)
	env := newEnv(t, a)
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s1", Prompt: "go", Queues: QueuesFor("")})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if string(res.Text.Data) != "done" || res.ErrorKind != "" || res.Turns != 2 {
		t.Fatalf("result %+v", res)
	}
	if q, _ := queues.Load("slow"); q != "agrun-wasm" {
		t.Errorf("slow ran on %v", q)
	}
	if q, _ := queues.Load("fast"); q != "agrun-mcp" {
		t.Errorf("fast ran on %v", q)
	}
	recs, _ := st.Load(context.Background(), "s1", 0)
	if res.Seq != int64(len(recs)) {
		t.Errorf("result seq %d, %d records", res.Seq, len(recs))
	}
	h, _ := jsonRecords{}.History(recs)
	var roles []string
	for _, m := range h {
		roles = append(roles, string(m.Role)+":"+m.ToolCallID)
	}
	if strings.Join(roles, ",") != "user:,assistant:,tool:c1,tool:c2,assistant:" {
		t.Errorf("history %v", roles)
	}
	if n := kindOfRecords(t, recs); n["request"] != 2 || n["call"] != 2 || n["message"] != 5 {
		t.Errorf("records %v", n)
	}
}

// TestLocalCalls: on a workflow worker that serves the WASM queue, a
// read-only WASM call runs as its local activity; a call with side
// effects stays an activity task on the WASM queue (a lost worker's
// attempt must be known, not run again), unless the run retries side
// effects; a read-only MCP call, whose queue this worker does not serve,
// goes to the MCP queue. The results reach the model in call order either
// way.
func TestLocalCalls(t *testing.T) {
	for _, retrySE := range []bool{false, true} {
		t.Run(fmt.Sprintf("retry_side_effects=%v", retrySE), func(t *testing.T) {
			srv := chattest.New(t,
				chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "reader", Args: `{}`}, {ID: "c2", Name: "writer", Args: `{}`}, {ID: "c3", Name: "remote", Args: `{}`}}},
				chattest.Reply{Text: "done", Check: func(t testing.TB, r chattest.Request) {
					var ids []string
					for _, m := range r.Messages {
						if m.Role == "tool" {
							ids = append(ids, m.ToolCallID+"="+*m.Content)
						}
					}
					if strings.Join(ids, ",") != `c1={"tool":"reader"},c2={"tool":"writer"},c3={"tool":"remote"}` {
						t.Errorf("tool messages %v", ids)
					}
				}},
			)
			var queues sync.Map
			answer := func(name string) func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return func(context.Context, json.RawMessage) (json.RawMessage, error) {
					return json.RawMessage(`{"tool":"` + name + `"}`), nil
				}
			}
			reader := &fakeTool{name: "reader", source: "wasm", perms: []permission.Permission{permission.Read}, queues: &queues, run: answer("reader")}
			writer := &fakeTool{name: "writer", source: "wasm", perms: []permission.Permission{permission.Write}, queues: &queues, run: answer("writer")}
			remote := &fakeTool{name: "remote", source: "mcp", hints: []string{"read_only"}, queues: &queues, run: answer("remote")}
			a, _ := newActivities(t, srv, reader, writer, remote)
			env := newEnvServing(t, a, map[string]int{ServeWASM: 8, ServeLLM: 8})
			env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s1", Prompt: "go", Queues: QueuesFor(""), RetrySideEffects: retrySE})
			var res RunResult
			if err := env.GetWorkflowResult(&res); err != nil || string(res.Text.Data) != "done" || res.ErrorKind != "" {
				t.Fatalf("result %+v, %v", res, err)
			}
			// The test environment runs a workflow's local activities on
			// the queue "default-test-taskqueue".
			local := "default-test-taskqueue (local)"
			want := map[string]string{"reader": local, "writer": "agrun-wasm", "remote": "agrun-mcp"}
			if retrySE {
				want["writer"] = local
			}
			for name, w := range want {
				if q, _ := queues.Load(name); q != w {
					t.Errorf("%s ran on %v, want %s", name, q, w)
				}
			}
		})
	}
}

// TestLocalCallsWhileSlotsLast: two read-only calls that run at the same
// time (each waits for the other to start) on a worker with one local
// slot for WASM: one runs local, the other goes to the WASM queue.
func TestLocalCallsWhileSlotsLast(t *testing.T) {
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "a", Args: `{}`}, {ID: "c2", Name: "b", Args: `{}`}}},
		chattest.Reply{Text: "done"},
	)
	var queues sync.Map
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	meet := func(context.Context, json.RawMessage) (json.RawMessage, error) {
		started.Done()
		select {
		case <-both:
			return json.RawMessage(`{}`), nil
		case <-time.After(5 * time.Second):
			return nil, errors.New("the calls did not run at the same time")
		}
	}
	ta := &fakeTool{name: "a", source: "wasm", perms: []permission.Permission{permission.Read}, queues: &queues, run: meet}
	tb := &fakeTool{name: "b", source: "wasm", perms: []permission.Permission{permission.Read}, queues: &queues, run: meet}
	a, _ := newActivities(t, srv, ta, tb)
	env := newEnvServing(t, a, map[string]int{ServeWASM: 1, ServeLLM: 1})
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s1", Prompt: "go", Queues: QueuesFor("")})
	var res RunResult
	if err := env.GetWorkflowResult(&res); err != nil || string(res.Text.Data) != "done" || res.ErrorKind != "" {
		t.Fatalf("result %+v, %v", res, err)
	}
	qa, _ := queues.Load("a")
	qb, _ := queues.Load("b")
	got := []string{fmt.Sprint(qa), fmt.Sprint(qb)}
	slices.Sort(got)
	if strings.Join(got, ",") != "agrun-wasm,default-test-taskqueue (local)" {
		t.Errorf("the calls ran on %v, want one local and one on the WASM queue", got)
	}
}

// TestModelStepIsNotRepeated: a model step whose records were stored (its
// worker lost before it could report) is answered from the store by the
// next attempt: the provider sees one request.
func TestModelStepIsNotRepeated(t *testing.T) {
	srv := chattest.New(t, chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{"a":1}`}}})
	a, _ := newActivities(t, srv, &fakeTool{name: "t", source: "wasm", perms: []permission.Permission{permission.Write}})
	env := quietSuite().NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(a.Model, activity.RegisterOptions{Name: ModelActivity})
	var outs [2]ModelOutput
	for i := range outs {
		v, err := env.ExecuteActivity(ModelActivity, ModelStep{Session: "s", Seq: 0, Prompt: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Get(&outs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d model requests for one step", n)
	}
	for i, o := range outs {
		if len(o.Calls) != 1 || o.Calls[0].ID != "c1" || string(o.Calls[0].Args.Data) != `{"a":1}` || !o.Calls[0].SideEffects || o.Calls[0].Source != "wasm" {
			t.Fatalf("attempt %d: %+v", i+1, o)
		}
	}
	if outs[0].Recovered || !outs[1].Recovered || outs[0].Seq != outs[1].Seq {
		t.Fatalf("outputs %+v", outs)
	}
}

// TestLostWorkerRetriesBySideEffects: a tool call whose activity fails
// (its worker lost) is tried again when its tool has no side effects, and
// not when it has: the model is told the call may or may not have taken
// effect. Tool errors are results, never retried.
func TestLostWorkerRetriesBySideEffects(t *testing.T) {
	for _, tc := range []struct {
		name     string
		side     bool
		retrySE  bool
		attempts int
	}{{"read-only", false, false, 3}, {"side effects", true, false, 1}, {"side effects, retry_side_effects", true, true, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, nil)
			env.RegisterActivityWithOptions(func(ctx context.Context, in ModelStep) (ModelOutput, error) { return ModelOutput{}, nil },
				activity.RegisterOptions{Name: ModelActivity})
			env.RegisterActivityWithOptions(func(ctx context.Context, in ToolStep) (ToolResult, error) { return ToolResult{}, nil },
				activity.RegisterOptions{Name: ToolActivity})
			var tries atomic.Int32
			var final ModelStep
			env.OnActivity(ModelActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ModelStep) (ModelOutput, error) {
				if len(in.Results) == 0 {
					return ModelOutput{Seq: 2, Calls: []PendingCall{{ID: "c1", Tool: "t", Source: "wasm", SideEffects: tc.side}}}, nil
				}
				final = in
				return ModelOutput{Seq: 5, Done: true, Text: Payload{Data: []byte("ok")}}, nil
			})
			env.OnActivity(ToolActivity, mock.Anything, mock.Anything).Return(func(context.Context, ToolStep) (ToolResult, error) {
				tries.Add(1)
				// What Temporal reports when a worker stops heartbeating.
				return ToolResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
			})
			env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor(""), RetrySideEffects: tc.retrySE})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if int(tries.Load()) != tc.attempts {
				t.Fatalf("%d attempts, want %d", tries.Load(), tc.attempts)
			}
			if len(final.Results) != 1 || final.Results[0].Kind != registry.Other || final.Results[0].ID != "c1" {
				t.Fatalf("results %+v", final.Results)
			}
			may := strings.Contains(final.Results[0].Message, "may or may not have taken effect")
			if may != (tc.side && !tc.retrySE) || !strings.Contains(final.Results[0].Message, "the worker running the call was lost (Heartbeat)") {
				t.Fatalf("message %q", final.Results[0].Message)
			}
		})
	}
}

// TestResultsKeptWhenTheModelStepFails (issue 28, 1): a side-effect call
// ran, then the step that was to store its result with the model's reply
// failed for good — the provider failing past its attempts, then the
// session store refusing the first tries to keep the results. The run
// still stores the result (a Final step, retried until the store takes
// it), so no later run can call it never decided; the run ends with the
// provider's kind.
func TestResultsKeptWhenTheModelStepFails(t *testing.T) {
	env := newEnv(t, nil)
	env.RegisterActivityWithOptions(func(ctx context.Context, in ModelStep) (ModelOutput, error) { return ModelOutput{}, nil },
		activity.RegisterOptions{Name: ModelActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in ToolStep) (ToolResult, error) { return ToolResult{}, nil },
		activity.RegisterOptions{Name: ToolActivity})
	var replies, finals atomic.Int32
	var kept ModelStep
	env.OnActivity(ModelActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ModelStep) (ModelOutput, error) {
		switch {
		case len(in.Results) == 0:
			return ModelOutput{Seq: 2, Calls: []PendingCall{{ID: "c1", Tool: "write", Source: "wasm", SideEffects: true}}}, nil
		case !in.Final:
			replies.Add(1)
			return ModelOutput{}, temporal.NewApplicationError("503 from provider", string(loop.KindProvider))
		}
		if finals.Add(1) <= 4 { // the session store is down for a while
			return ModelOutput{}, errors.New("session store: connection refused")
		}
		kept = in
		return ModelOutput{Seq: 4}, nil
	})
	env.OnActivity(ToolActivity, mock.Anything, mock.Anything).Return(func(context.Context, ToolStep) (ToolResult, error) {
		return ToolResult{Output: Payload{Data: []byte(`{"written":true}`)}}, nil
	})
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor("")})
	var res RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if replies.Load() != 3 {
		t.Errorf("%d attempts of the model step, want 3", replies.Load())
	}
	if !kept.Final || len(kept.Results) != 1 || kept.Results[0].ID != "c1" || string(kept.Results[0].Output.Data) != `{"written":true}` || kept.Seq != 2 {
		t.Fatalf("the step that kept the results: %+v", kept)
	}
	if res.ErrorKind != string(loop.KindProvider) || res.Seq != 4 {
		t.Fatalf("result %+v: want the provider's kind, seq 4 (after the kept results)", res)
	}
}

// flakyStore is a session store that goes down when told and comes back
// after failing upAfter operations.
type flakyStore struct {
	session.Store
	down    atomic.Bool
	fails   atomic.Int32
	upAfter int32
}

func (f *flakyStore) failing() error {
	if !f.down.Load() {
		return nil
	}
	if f.fails.Add(1) >= f.upAfter {
		f.down.Store(false)
	}
	return errors.New("session store: connection refused")
}

func (f *flakyStore) Load(ctx context.Context, id string, from int64) ([]json.RawMessage, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	return f.Store.Load(ctx, id, from)
}

func (f *flakyStore) Append(ctx context.Context, id string, seq int64, recs []json.RawMessage) (bool, error) {
	if err := f.failing(); err != nil {
		return false, err
	}
	return f.Store.Append(ctx, id, seq, recs)
}

// TestSideEffectResultSurvivesAFailedStep (issue 28, 1), with the real
// activities: a side-effect call runs, then the step that was to store
// its result with the model's reply fails for good — the provider failing
// on every attempt, or the session store down for longer than the step's
// attempts. The run ends with the failure's kind, the result is in the
// session, and the next run's model is told what the call returned; the
// tool ran once.
func TestSideEffectResultSurvivesAFailedStep(t *testing.T) {
	toldTheResult := chattest.Reply{Text: "ok", Check: func(t testing.TB, r chattest.Request) {
		for _, m := range r.Messages {
			if m.Role == "tool" && m.ToolCallID == "c1" {
				if *m.Content != `{"written":1}` {
					t.Errorf("the model was told %q of the call that ran", *m.Content)
				}
				return
			}
		}
		t.Errorf("the model was told nothing of the call that ran")
	}}
	write := chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "write", Args: `{}`}}}
	unavailable := chattest.Reply{Status: 503, Body: `{"error":{"message":"overloaded"}}`}
	for _, tc := range []struct {
		name     string
		replies  []chattest.Reply
		storeOut bool
		kind     string
	}{
		{"the provider fails", []chattest.Reply{write, unavailable, unavailable, unavailable, toldTheResult}, false, string(loop.KindProvider)},
		{"the session store is down", []chattest.Reply{write, toldTheResult}, true, string(loop.KindOther)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := chattest.New(t, tc.replies...)
			var ran atomic.Int32
			var st *flakyStore
			a, mem := newActivities(t, srv, &fakeTool{name: "write", source: "wasm", perms: []permission.Permission{permission.Write},
				run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
					ran.Add(1)
					st.down.Store(tc.storeOut) // from here on, until 5 operations failed
					return json.RawMessage(`{"written":1}`), nil
				}})
			st = &flakyStore{Store: mem, upAfter: 5}
			a.Sessions = st
			env := newEnv(t, a)
			env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "write it", Queues: QueuesFor("")})
			var res RunResult
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			if res.ErrorKind != tc.kind {
				t.Fatalf("the first run ended %+v, want kind %s", res, tc.kind)
			}
			env = newEnv(t, a)
			env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "did it work?", Seq: res.Seq, Queues: QueuesFor("")})
			if err := env.GetWorkflowResult(&res); err != nil || string(res.Text.Data) != "ok" {
				t.Fatalf("the next run %+v %v", res, err)
			}
			if ran.Load() != 1 {
				t.Fatalf("the tool ran %d times", ran.Load())
			}
		})
	}
}

// TestCancelledCallsKept (issue 28, 3): a run cancelled while its calls
// run stores what they did — the finished one's result, the one cut
// short answered "cancelled ... may or may not have taken effect" — so
// that no later run calls them never decided.
func TestCancelledCallsKept(t *testing.T) {
	env := newEnv(t, nil)
	env.RegisterActivityWithOptions(func(ctx context.Context, in ModelStep) (ModelOutput, error) { return ModelOutput{}, nil },
		activity.RegisterOptions{Name: ModelActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in ToolStep) (ToolResult, error) { return ToolResult{}, nil },
		activity.RegisterOptions{Name: ToolActivity})
	var kept ModelStep
	env.OnActivity(ModelActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, in ModelStep) (ModelOutput, error) {
		if len(in.Results) == 0 {
			return ModelOutput{Seq: 2, Calls: []PendingCall{{ID: "quick", Tool: "t"}, {ID: "slow", Tool: "t", SideEffects: true}}}, nil
		}
		kept = in
		return ModelOutput{Seq: 4}, nil
	})
	env.OnActivity(ToolActivity, mock.Anything, mock.Anything).Return(func(ctx context.Context, in ToolStep) (ToolResult, error) {
		if in.Call.ID == "quick" {
			return ToolResult{Output: Payload{Data: []byte(`1`)}}, nil
		}
		<-ctx.Done()
		return ToolResult{}, ctx.Err()
	})
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor("")})
	var res RunResult
	env.GetWorkflowResult(&res)
	if !kept.Final || len(kept.Results) != 2 || kept.Results[0].ID != "quick" || string(kept.Results[0].Output.Data) != "1" {
		t.Fatalf("kept %+v", kept)
	}
	if r := kept.Results[1]; r.ID != "slow" || r.Kind != registry.Cancelled || !strings.Contains(r.Message, "cancelled by the user") ||
		!strings.Contains(r.Message, "may or may not have taken effect") {
		t.Fatalf("the call cut short: %+v", r)
	}
	if res.ErrorKind != string(loop.KindCancelled) {
		t.Errorf("result %+v", res)
	}
}

// TestContinueAsNewCarriesTheRun: when the server suggests it (or past
// ContinueAfterEvents: the end-to-end test) the run continues as new between two steps, carrying the seq, the turns and the
// results the next model step needs.
func TestContinueAsNewCarriesTheRun(t *testing.T) {
	env := newEnv(t, nil)
	env.RegisterActivityWithOptions(func(ctx context.Context, in ModelStep) (ModelOutput, error) {
		return ModelOutput{Seq: 3, Calls: []PendingCall{{ID: "c1", Tool: "t"}}, Usage: loop.Usage{TotalTokens: 7}}, nil
	}, activity.RegisterOptions{Name: ModelActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in ToolStep) (ToolResult, error) {
		return ToolResult{Output: Payload{Data: []byte(`{"x":1}`)}}, nil
	}, activity.RegisterOptions{Name: ToolActivity})
	env.SetContinueAsNewSuggested(true) // as the server does near its limits
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor("")})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("err %v", err)
	}
	var next RunInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if next.Prompt != "" || next.Seq != 3 || next.Turns != 1 || len(next.Results) != 1 || next.Results[0].ID != "c1" ||
		string(next.Results[0].Output.Data) != `{"x":1}` || next.Usage.TotalTokens != 7 || next.ContinuedAsNew != 1 {
		t.Fatalf("next %+v", next)
	}
}

// TestLargeResultsGoByReference: a tool result over the inline limit is
// stored in the blob store and its reference travels through the
// workflow; the next model step reads it back whole (the session keeps the
// full result; the model is sent the loop's capped view).
func TestLargeResultsGoByReference(t *testing.T) {
	big := `{"s":"` + strings.Repeat("x", 300<<10) + `"}`
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "big", Args: `{}`}}},
		chattest.Reply{Text: "read it"},
	)
	a, st := newActivities(t, srv, &fakeTool{name: "big", source: "wasm", run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(big), nil
	}})
	var refs atomic.Int32
	env := newEnv(t, nil)
	env.RegisterActivityWithOptions(a.Model, activity.RegisterOptions{Name: ModelActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in ToolStep) (ToolResult, error) {
		r, err := a.Tool(ctx, in)
		if r.Output.Ref != "" && r.Output.Data == nil && r.Output.Size == len(big) {
			refs.Add(1)
		}
		return r, err
	}, activity.RegisterOptions{Name: ToolActivity})
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor("")})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if refs.Load() != 1 {
		t.Fatalf("the result did not go by reference")
	}
	recs, _ := st.Load(context.Background(), "s", 0)
	h, _ := jsonRecords{}.History(recs)
	if len(h) != 4 || h[2].Role != loop.RoleTool || len(h[2].FullContent) < len(big) {
		t.Fatalf("the session does not keep the whole result (%d messages)", len(h))
	}
}

// TestMaxTurnsKeepsTheCallsThatRan: a run whose turns are spent after a
// reply's calls ran stores their results (one more step, no model
// request) and ends with max_turns, as the local path does.
func TestMaxTurnsKeepsTheCallsThatRan(t *testing.T) {
	srv := chattest.New(t, chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{}`}}})
	a, st := newActivities(t, srv, &fakeTool{name: "t", source: "wasm"})
	env := newEnv(t, a)
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor(""), MaxTurns: 1})
	var res RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	recs, _ := st.Load(context.Background(), "s", 0)
	h, _ := jsonRecords{}.History(recs)
	if res.ErrorKind != "max_turns" || len(srv.Requests()) != 1 || len(h) != 3 || h[2].Role != loop.RoleTool || h[2].Content != `{"tool":"t"}` || res.Seq != int64(len(recs)) {
		t.Fatalf("result %+v, %d requests, history %+v", res, len(srv.Requests()), h)
	}
}

// TestTokenBudgetAcrossSteps: the worker's [llm] max_total_tokens is the
// run's, counted across its steps: a run whose first step used more than
// the budget stores that step's call results and ends with the budget's
// error, without another model request.
func TestTokenBudgetAcrossSteps(t *testing.T) {
	srv := chattest.New(t, chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{}`}},
		Usage: &chattest.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}})
	a, st := newActivities(t, srv, &fakeTool{name: "t", source: "wasm"})
	a.Loop.MaxTotalTokens = 10
	env := newEnv(t, a)
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor("")})
	var res RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	recs, _ := st.Load(context.Background(), "s", 0)
	h, _ := jsonRecords{}.History(recs)
	want := string(loop.KindOf(&loop.BudgetError{Budget: "tokens"}))
	if res.ErrorKind != want || len(srv.Requests()) != 1 || len(h) != 3 || h[2].Role != loop.RoleTool || res.Usage.TotalTokens != 15 {
		t.Fatalf("result %+v (want kind %q), %d requests, %d messages", res, want, len(srv.Requests()), len(h))
	}
}

// TestRetryChecksTheToolHere: a call the model step's worker saw as
// read-only is retried after its first attempt was lost; the worker of
// the retry has the tool with side effects (an upload replaced it), so it
// does not run it and tells the model instead.
func TestRetryChecksTheToolHere(t *testing.T) {
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{}`}}},
		chattest.Reply{Text: "ok"},
	)
	var ran atomic.Int32
	writer := &fakeTool{name: "t", source: "wasm", perms: []permission.Permission{permission.Write},
		run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			ran.Add(1)
			return json.RawMessage(`{}`), nil
		}}
	a, st := newActivities(t, srv, writer)
	env := newEnv(t, nil)
	env.RegisterActivityWithOptions(func(ctx context.Context, in ModelStep) (ModelOutput, error) {
		o, err := a.Model(ctx, in)
		for i := range o.Calls {
			o.Calls[i].SideEffects = false // as the model step's worker saw the tool
		}
		return o, err
	}, activity.RegisterOptions{Name: ModelActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in ToolStep) (ToolResult, error) {
		if activity.GetInfo(ctx).Attempt == 1 {
			return ToolResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
		}
		return a.Tool(ctx, in)
	}, activity.RegisterOptions{Name: ToolActivity})
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor("")})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	recs, _ := st.Load(context.Background(), "s", 0)
	h, _ := jsonRecords{}.History(recs)
	if ran.Load() != 0 || len(h) != 4 || !strings.Contains(h[2].Content, "may or may not have taken effect") {
		t.Fatalf("ran %d times; history %+v", ran.Load(), h)
	}
}

// TestToolCallBudgetAcrossSteps: a run's [llm] max_tool_calls counts each
// call once across the steps: with a budget of 3, a reply of 3 calls runs
// them all and the model answers; a later reply of one more call ends the
// run with the budget's error, its call answered "not run".
func TestToolCallBudgetAcrossSteps(t *testing.T) {
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{"i":1}`}, {ID: "c2", Name: "t", Args: `{"i":2}`}, {ID: "c3", Name: "t", Args: `{"i":3}`}}},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c4", Name: "t", Args: `{"i":4}`}}},
		chattest.Reply{Text: "never"},
	)
	var ran atomic.Int32
	a, st := newActivities(t, srv, &fakeTool{name: "t", source: "wasm", run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		ran.Add(1)
		return json.RawMessage(`{}`), nil
	}})
	a.Loop.MaxToolCalls = 3
	env := newEnv(t, a)
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor("")})
	var res RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	recs, _ := st.Load(context.Background(), "s", 0)
	h, _ := jsonRecords{}.History(recs)
	want := string(loop.KindOf(&loop.BudgetError{Budget: "tool_calls"}))
	last := h[len(h)-1]
	if ran.Load() != 3 || res.ErrorKind != want || len(srv.Requests()) != 2 || last.ToolCallID != "c4" || !strings.Contains(last.Content, "not run") {
		t.Fatalf("ran %d, result %+v, %d requests, last %+v", ran.Load(), res, len(srv.Requests()), last)
	}
}

// TestWholeResultByReference: a result whose JSON (message, audit) is
// over the inline limit travels as a reference and comes back whole.
func TestWholeResultByReference(t *testing.T) {
	srv := chattest.New(t)
	a, _ := newActivities(t, srv)
	a.InlineLimit = 16
	r, err := a.spill(context.Background(), ToolResult{ID: "c1", Kind: registry.Timeout, Message: strings.Repeat("m", 2000)})
	if err != nil || r.Whole == nil || r.Message != "" {
		t.Fatalf("spilled %+v %v", r, err)
	}
	invs, err := a.invocations(context.Background(), []ToolResult{r})
	if err != nil || invs["c1"].Err == nil || !strings.Contains(invs["c1"].Err.Error(), strings.Repeat("m", 2000)) {
		t.Fatalf("invocations %+v %v", invs, err)
	}
}

// askAll is an Approver under which every call needs a yes.
type askAll struct{}

func (askAll) NeedsApproval(loop.ApprovalRequest) bool { return true }
func (askAll) Approve(context.Context, loop.ApprovalRequest) (loop.Decision, error) {
	return loop.Decision{Answer: loop.Deny, By: "non-interactive"}, nil
}

// TestToolActivityChecksTheStoredApproval (issue 28, 4): a tool activity
// runs a call that needs a person's yes only if the session holds the
// decision approving that very call — a forged model-step completion (as
// `temporal activity complete` can send) naming a made-up call, a call
// nobody decided, another call under an approved call's id, an approved
// call that already ran, or a later reply's call reusing an approved id,
// is refused, and the tool never runs; the call as asked for and
// approved runs.
func TestToolActivityChecksTheStoredApproval(t *testing.T) {
	var ran atomic.Int32
	tool := &fakeTool{name: "w", source: "wasm", perms: []permission.Permission{permission.Write},
		run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			ran.Add(1)
			return json.RawMessage(`1`), nil
		}}
	a, st := newActivities(t, chattest.New(t), tool)
	a.Loop.Approver = askAll{}
	env := quietSuite().NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(a.Tool, activity.RegisterOptions{Name: ToolActivity})
	call := func(args string) ToolResult {
		t.Helper()
		v, err := env.ExecuteActivity(ToolActivity, ToolStep{Session: "s", Call: PendingCall{ID: "c1", Tool: "w", Args: Payload{Data: []byte(args)}}})
		if err != nil {
			t.Fatal(err)
		}
		var r ToolResult
		if err := v.Get(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	store := func(recs ...json.RawMessage) {
		t.Helper()
		old, _ := st.Load(context.Background(), "s", 0)
		if _, err := st.Append(context.Background(), "s", int64(len(old)), recs); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(b json.RawMessage, err error) json.RawMessage {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	reply := func(args string) json.RawMessage {
		return rec(jsonRecords{}.Message(loop.Message{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "c1", Name: "w", Arguments: args}}}))
	}
	approval := rec(jsonRecords{}.Decision(loop.DecisionRecord{ApprovalRequest: loop.ApprovalRequest{CallID: "c1", Tool: "w"}, Decision: loop.Decision{Answer: loop.ApproveOnce, By: "user"}}))
	refused := func(what, args, why string) {
		t.Helper()
		if r := call(args); r.Kind != registry.DeniedByUser || ran.Load() != 0 || !strings.Contains(r.Message, why) {
			t.Fatalf("%s: %+v, ran %d", what, r, ran.Load())
		}
	}
	refused("a made-up call", `{}`, "no reply asked for it")
	store(rec(jsonRecords{}.Message(loop.Message{Role: loop.RoleUser, Content: "go"})), reply(`{}`))
	refused("a call nobody decided", `{}`, "holds no decision approving it")
	store(approval)
	refused("another call under the approved id", `{"path":"/etc/passwd"}`, "another call under its id")
	if r := call(`{}`); r.Kind != "" || ran.Load() != 1 {
		t.Fatalf("the approved call: %+v, ran %d", r, ran.Load())
	}
	ran.Store(0)
	store(rec(jsonRecords{}.Message(loop.Message{Role: loop.RoleTool, ToolCallID: "c1", Name: "w", Content: "1"})))
	refused("the approved call again, after it ran", `{}`, "no such call waiting")
	store(reply(`{"n":2}`))
	refused("a later reply's call reusing the approved id", `{"n":2}`, "holds no decision approving it")
}

type approveAll struct{}

func (approveAll) NeedsApproval(loop.ApprovalRequest) bool { return true }
func (approveAll) Approve(context.Context, loop.ApprovalRequest) (loop.Decision, error) {
	return loop.Decision{Answer: loop.ApproveOnce, By: "test"}, nil
}

// TestApprovedCallRunsThroughTheWorkflow: a call the model step's
// Approver approved runs on its tool activity, which finds the decision
// the step stored (after the reply that asked for the call).
func TestApprovedCallRunsThroughTheWorkflow(t *testing.T) {
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "w", Args: `{"n":1}`}}},
		chattest.Reply{Text: "done"},
	)
	var ran atomic.Int32
	a, _ := newActivities(t, srv, &fakeTool{name: "w", source: "wasm", perms: []permission.Permission{permission.Write},
		run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			ran.Add(1)
			return json.RawMessage(`"written"`), nil
		}})
	a.Loop.Approver = approveAll{}
	env := newEnv(t, a)
	env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: "p", Queues: QueuesFor("")})
	var res RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if string(res.Text.Data) != "done" || ran.Load() != 1 {
		t.Fatalf("result %+v, the tool ran %d times", res, ran.Load())
	}
}

// TestUnfinishedCallsAreNotCalledNeverDecided (issue 28, 1 and 3): a
// session whose last run handed a call on and never stored its result
// (the run was terminated, or could not store it) starts its next run by
// answering that call "... may or may not have run", stored, instead of
// the loop's "never decided: a new prompt came first"; a call that waited
// for a decision that never came is still called never decided.
func TestUnfinishedCallsAreNotCalledNeverDecided(t *testing.T) {
	for _, tc := range []struct {
		name     string
		approver loop.Approver
		want     string
	}{{"handed on", nil, "it may or may not have run"}, {"waiting for a decision", askAll{}, "never decided"}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := chattest.New(t, chattest.Reply{Text: "ok"})
			a, st := newActivities(t, srv, &fakeTool{name: "w", source: "wasm", perms: []permission.Permission{permission.Write}})
			a.Loop.Approver = tc.approver
			var recs []json.RawMessage
			for _, m := range []loop.Message{{Role: loop.RoleUser, Content: "write"},
				{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "c1", Name: "w", Arguments: `{}`}}}} {
				b, err := jsonRecords{}.Message(m)
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, b)
			}
			if _, err := st.Append(context.Background(), "s", 0, recs); err != nil {
				t.Fatal(err)
			}
			env := quietSuite().NewTestActivityEnvironment()
			env.RegisterActivityWithOptions(a.Model, activity.RegisterOptions{Name: ModelActivity})
			if _, err := env.ExecuteActivity(ModelActivity, ModelStep{Session: "s", Seq: 2, Prompt: "again"}); err != nil {
				t.Fatal(err)
			}
			var sent string
			for _, m := range srv.Requests()[0].Messages {
				if m.Role == "tool" && m.ToolCallID == "c1" {
					sent = *m.Content
				}
			}
			if !strings.Contains(sent, tc.want) {
				t.Fatalf("the model was told %q, want %q", sent, tc.want)
			}
			all, _ := st.Load(context.Background(), "s", 0)
			h, _ := jsonRecords{}.History(all)
			if len(h) != 5 || h[2].Role != loop.RoleTool || h[2].Content != sent || h[3].Content != "again" {
				t.Fatalf("stored history %+v", h)
			}
		})
	}
}

// TestStaleSeqDoesNotDropThePrompt (issue 28, 2): a run started with a
// seq read before the session's previous run stored its records (the
// starter reads the length, then starts the workflow; a run ending in
// between) reads where its records begin itself once it has started: it
// sends its own prompt, after the previous run's records, instead of
// taking that run's answer for its own. Its first step, stored and then
// lost before it reported, is answered from the store on its retry: no
// second model request, no second copy of the prompt.
func TestStaleSeqDoesNotDropThePrompt(t *testing.T) {
	srv := chattest.New(t, chattest.Reply{Text: "first answer"}, chattest.Reply{Text: "second answer"})
	a, st := newActivities(t, srv)
	run := func(env *testsuite.TestWorkflowEnvironment, prompt string) RunResult {
		t.Helper()
		env.ExecuteWorkflow(WorkflowName, RunInput{Session: "s", Prompt: prompt, Seq: 0, Queues: QueuesFor("")})
		var res RunResult
		if err := env.GetWorkflowResult(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run(newEnv(t, a), "one"); string(res.Text.Data) != "first answer" {
		t.Fatalf("first run %+v", res)
	}
	env := newEnv(t, a)
	var attempts atomic.Int32
	env.OnActivity(ModelActivity, mock.Anything, mock.Anything).Return(func(ctx context.Context, in ModelStep) (ModelOutput, error) {
		o, err := a.Model(ctx, in)
		if attempts.Add(1) == 1 {
			return ModelOutput{}, errors.New("the worker was lost after the step stored its records")
		}
		return o, err
	})
	res := run(env, "two") // seq 0: stale
	if string(res.Text.Data) != "second answer" || res.ErrorKind != "" {
		t.Fatalf("second run %+v: want its own answer", res)
	}
	if n := len(srv.Requests()); n != 2 || attempts.Load() != 2 {
		t.Fatalf("%d model requests in %d attempts, want 2 in 2", n, attempts.Load())
	}
	recs, _ := st.Load(context.Background(), "s", 0)
	h, _ := jsonRecords{}.History(recs)
	var got []string
	for _, m := range h {
		got = append(got, string(m.Role)+":"+m.Content)
	}
	if strings.Join(got, "|") != "user:one|assistant:first answer|user:two|assistant:second answer" || res.Seq != int64(len(recs)) {
		t.Fatalf("history %q, result seq %d of %d records", got, res.Seq, len(recs))
	}
}

// TestLostResultText: what the model is told of a call whose attempts
// failed is the activity's own message, cleaned and capped — not
// Temporal's wrapping (event ids, types), not the kilobytes of nested
// causes an object store's SDK writes, not a terminal escape.
func TestLostResultText(t *testing.T) {
	long := "put blobs/sha256/ab: operation error S3: PutObject, \x1b[31m" + strings.Repeat("request send failed, ", 200)
	err := temporal.NewApplicationErrorWithCause(long, "", errors.New("cause"))
	r := lostResult(PendingCall{ID: "c1"}, err, false, 3)
	if r.ID != "c1" || r.Kind != registry.Other {
		t.Fatalf("result %+v", r)
	}
	if !strings.HasPrefix(r.Message, "the call failed on the cluster: put blobs/sha256/ab: operation error S3: PutObject, ") ||
		!strings.HasSuffix(r.Message, " after 3 attempts") || strings.Contains(r.Message, "\x1b") || len(r.Message) > 600 {
		t.Fatalf("message (%d bytes): %q", len(r.Message), r.Message)
	}
}
