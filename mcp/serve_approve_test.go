package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// approvalServer serves one tool, "write_note", whose runs it counts, with
// opts; approve decides every call.
func approvalServer(t *testing.T, approve func(ApprovalCall) Approval, opts ServerOptions) (*sdk.Server, *atomic.Int32) {
	t.Helper()
	var runs atomic.Int32
	reg := registry.New()
	if err := reg.Register(fakeTool{name: "write_note", perms: []permission.Permission{permission.Write},
		schema: `{"type":"object","properties":{"text":{"type":"string"}}}`,
		run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`"written"`), nil
		}}); err != nil {
		t.Fatal(err)
	}
	opts.Approve = approve
	return NewServer(reg, &opts), &runs
}

// connectClient connects an SDK client to srv in memory, speaking
// version (empty: the latest), answering questions with answer (nil: no
// elicitation offered); multi round-trip handling off when raw.
func connectClient(t *testing.T, srv *sdk.Server, version string, answer func(*sdk.ElicitRequest) (*sdk.ElicitResult, error), raw bool) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	co := &sdk.ClientOptions{}
	if answer != nil {
		co.ElicitationHandler = func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) { return answer(r) }
	}
	co.MultiRoundTrip = &sdk.MultiRoundTripOptions{Disabled: raw}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "c"}, co).Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func resultText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

var askAll = func(c ApprovalCall) Approval {
	return Approval{Ask: true, Question: "agrun: " + c.Tool + " wants to write\x1b[2J"}
}

// TestServeApprovalAsksTheClientsUser: a call Approve says needs a yes
// asks the client's user through elicitation, on the older protocol
// (elicitation/create) and the newer one (an input-required result,
// which the SDK client fulfils and retries): yes runs the call once, no
// (with a cleaned reason), decline and dismiss refuse it with
// denied_by_user; the question is cleaned.
func TestServeApprovalAsksTheClientsUser(t *testing.T) {
	for _, version := range []string{"2025-11-25", ""} {
		for _, tc := range []struct {
			name   string
			answer *sdk.ElicitResult
			ran    bool
			want   string
		}{
			{"yes", &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, true, "written"},
			{"no", &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": false, "reason": "not now\x1b]0;x\a"}}, false, "error (denied_by_user): the client's user said no: not now"},
			{"decline", &sdk.ElicitResult{Action: "decline"}, false, "error (denied_by_user): the client's user declined"},
			{"cancel", &sdk.ElicitResult{Action: "cancel"}, false, "error (denied_by_user): the client's user dismissed the question"},
		} {
			t.Run(version+"/"+tc.name, func(t *testing.T) {
				srv, runs := approvalServer(t, askAll, ServerOptions{})
				var asked atomic.Value
				cs := connectClient(t, srv, version, func(r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					asked.Store(r.Params.Message)
					return tc.answer, nil
				}, false)
				res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{"text": "hi"}})
				if err != nil {
					t.Fatal(err)
				}
				if got := resultText(res); !strings.HasPrefix(got, tc.want) || strings.ContainsAny(got, "\x1b\a") {
					t.Errorf("result %q, want %q", got, tc.want)
				}
				if res.IsError == tc.ran {
					t.Errorf("isError %v", res.IsError)
				}
				if n := runs.Load(); n != map[bool]int32{true: 1, false: 0}[tc.ran] {
					t.Errorf("the tool ran %d times", n)
				}
				if q, _ := asked.Load().(string); !strings.HasPrefix(q, "agrun: write_note wants to write") || strings.Contains(q, "\x1b") {
					t.Errorf("question %q", q)
				}
			})
		}
	}
}

// TestServeApprovalWithoutElicitation: a client that offers no
// elicitation cannot be asked, so the call is refused, saying why, and
// never runs; Approve's Refuse refuses unasked; a call Approve lets
// through runs unasked.
func TestServeApprovalWithoutElicitation(t *testing.T) {
	srv, runs := approvalServer(t, askAll, ServerOptions{})
	cs := connectClient(t, srv, "", nil, false)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(res); !res.IsError || !strings.Contains(got, "cannot be asked: it offers no form elicitation") || runs.Load() != 0 {
		t.Errorf("no elicitation: %q (ran %d)", got, runs.Load())
	}

	asked := false
	srv, runs = approvalServer(t, func(ApprovalCall) Approval { return Approval{Refuse: `approve = "never"`} }, ServerOptions{})
	cs = connectClient(t, srv, "", func(*sdk.ElicitRequest) (*sdk.ElicitResult, error) { asked = true; return nil, nil }, false)
	res, _ = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{}})
	if got := resultText(res); got != `error (denied_by_user): approve = "never"` || asked || runs.Load() != 0 {
		t.Errorf("refused: %q asked=%v ran=%d", got, asked, runs.Load())
	}

	var seen ApprovalCall
	srv, runs = approvalServer(t, func(c ApprovalCall) Approval { seen = c; return Approval{} }, ServerOptions{})
	cs = connectClient(t, srv, "", nil, false)
	res, _ = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{"text": "x"}})
	if resultText(res) != "written" || runs.Load() != 1 || seen.Tool != "write_note" || string(seen.Arguments) != `{"text":"x"}` {
		t.Errorf("allowed: %q ran=%d call=%+v", resultText(res), runs.Load(), seen)
	}
}

// TestServeApprovalForgedAnswer: on the multi round-trip protocol the
// answer comes back with the client's retry; an answer with no request
// state, a made-up one, or one asked about other arguments does not run
// the call. The genuine round trip does.
func TestServeApprovalForgedAnswer(t *testing.T) {
	srv, runs := approvalServer(t, askAll, ServerOptions{})
	cs := connectClient(t, srv, "", func(*sdk.ElicitRequest) (*sdk.ElicitResult, error) { return nil, nil }, true)
	ctx := context.Background()
	yes := sdk.InputResponseMap{approvalKey: &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	for _, state := range []string{"", "AAAAAAAAAAA.AAAA", "x"} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{"text": "a"}, InputResponses: yes, RequestState: state})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(resultText(res), "does not belong to this call") {
			t.Errorf("state %q: %q", state, resultText(res))
		}
	}
	// The question, as the raw client sees it.
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{"text": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.NeedsInput() || res.InputRequests[approvalKey] == nil || res.RequestState == "" {
		t.Fatalf("no question: %+v", res)
	}
	// Its state, used for other arguments.
	res2, _ := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{"text": "b"}, InputResponses: yes, RequestState: res.RequestState})
	if !res2.IsError || runs.Load() != 0 {
		t.Errorf("another call's answer: %q (ran %d)", resultText(res2), runs.Load())
	}
	// And for the call it was asked about.
	res3, _ := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{"text": "a"}, InputResponses: yes, RequestState: res.RequestState})
	if res3.IsError || runs.Load() != 1 {
		t.Errorf("the genuine answer: %q (ran %d)", resultText(res3), runs.Load())
	}
}

// TestServeApprovalTimeout: no answer within ApprovalTimeout denies the
// call (elicitation/create, older protocol).
func TestServeApprovalTimeout(t *testing.T) {
	srv, runs := approvalServer(t, askAll, ServerOptions{ApprovalTimeout: 100 * time.Millisecond})
	cs := connectClient(t, srv, "2025-11-25", func(r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
		time.Sleep(2 * time.Second)
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}, false)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_note", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(res); !strings.Contains(got, "did not answer within 100ms") || runs.Load() != 0 {
		t.Errorf("%q (ran %d)", got, runs.Load())
	}
}
