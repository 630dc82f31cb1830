package telemetry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/loop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestLoopAdapter: a run fed from the loop's events, messages and request
// infos has its spans under the run's, the tool's audit, the request's
// tokens; with CaptureContent the request's input is the messages since
// the last request and its output the streamed text; Finish sets the
// run's error kind.
func TestLoopAdapter(t *testing.T) {
	for _, capture := range []bool{false, true} {
		rec := tracetest.NewSpanRecorder()
		tel, err := setup(context.Background(), Config{CaptureContent: capture}, sdkmetric.NewManualReader(), rec)
		if err != nil {
			t.Fatal(err)
		}
		loopRun(tel)
		spans := rec.Ended()
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		if strings.Join(names, ",") != "chat m,execute_tool word_count,chat m,invoke_agent agrun" {
			t.Fatalf("spans %v", names)
		}
		run := spans[3]
		for _, s := range spans[:3] {
			if s.Parent().SpanID() != run.SpanContext().SpanID() {
				t.Errorf("%s is not under the run", s.Name())
			}
		}
		if a := attrs(spans[1]); a["agrun.sandbox.memory.peak"].AsInt64() != 2<<20 || a["gen_ai.tool.call.id"].AsString() != "call_1" {
			t.Errorf("tool attributes %v", a)
		}
		first, second := attrs(spans[0]), attrs(spans[2])
		if first["gen_ai.usage.input_tokens"].AsInt64() != 50 || second["gen_ai.usage.output_tokens"].AsInt64() != 9 {
			t.Errorf("request attributes %v %v", first, second)
		}
		in, out := first["gen_ai.input.messages"].AsString(), second["gen_ai.output.messages"].AsString()
		if capture != strings.Contains(in, "count these words") || capture != strings.Contains(out, "three three") {
			t.Errorf("capture %v: input %q, output %q", capture, in, out)
		}
		if capture && strings.Contains(second["gen_ai.input.messages"].AsString(), "count these words") {
			t.Errorf("the second request's input repeats the first's")
		}
	}

	rec := tracetest.NewSpanRecorder()
	tel, _ := setup(context.Background(), Config{}, sdkmetric.NewManualReader(), rec)
	_, r := tel.StartRun(context.Background(), "s", "m")
	r.LoopRequest(loop.RequestInfo{Model: "m", Duration: time.Millisecond, Error: "loop: 401 Unauthorized", ErrorKind: loop.KindProvider})
	r.Finish(errors.New("failed"))
	spans := rec.Ended()
	if len(spans) != 2 || attrs(spans[0])["error.type"].AsString() != string(loop.KindProvider) || attrs(spans[1])["error.type"].AsString() != string(loop.KindOther) {
		t.Fatalf("failed run: %v", spans)
	}
	// A direct call (serve): its span under ctx, the policy's decision.
	rec = tracetest.NewSpanRecorder()
	tel, _ = setup(context.Background(), Config{}, sdkmetric.NewManualReader(), rec)
	tel.Call(context.Background(), time.Now(), []byte(`{}`), Tool{Name: "get_weather", ErrorKind: "permission_denied"})
	tel.Call(context.Background(), time.Now(), []byte(`{}`), Tool{Name: "nosuch", ErrorKind: "not_found"})
	spans = rec.Ended()
	if len(spans) != 2 || attrs(spans[0])["agrun.permission.decision"].AsString() != "denied" || attrs(spans[1])["agrun.permission.decision"].Type() != 0 {
		t.Fatalf("direct calls: %v %v", attrs(spans[0]), attrs(spans[1]))
	}
	if _, ok := attrs(spans[0])["gen_ai.tool.call.id"]; ok {
		t.Errorf("a direct call has no call id: %v", attrs(spans[0]))
	}
	// Off: a nil Run takes every call.
	var off *Telemetry
	_, nr := off.StartRun(context.Background(), "s", "m")
	nr.Event(&loop.TextDelta{Text: "x"})
	nr.Message(loop.Message{Role: loop.RoleUser})
	nr.LoopRequest(loop.RequestInfo{})
	nr.Finish(nil)
	off.Call(context.Background(), time.Now(), nil, Tool{Name: "x"})
}
