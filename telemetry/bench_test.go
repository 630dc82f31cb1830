package telemetry

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agcore/agrun/loop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// discard is a span exporter that drops what it is given: the cost of
// the SDK's batching without the network.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// loopRun feeds one run through r as the CLI does: two requests, a tool
// call with its audit, a few text deltas.
func loopRun(t *Telemetry) {
	_, r := t.StartRun(context.Background(), RunInfo{Session: "sess", Provider: loop.ProviderInfo{API: "chat", System: "openai", Model: "m", Endpoint: "https://api.openai.com/v1"}})
	r.Message(loop.Message{Role: loop.RoleUser, Content: "count these words"})
	r.LoopRequest(loop.RequestInfo{Model: "m", Duration: 300 * time.Millisecond, FinishReason: "tool_calls", Usage: loop.Usage{PromptTokens: 50, CompletionTokens: 7}})
	r.Message(loop.Message{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "call_1", Name: "word_count", Arguments: `{"text":"count these words"}`}}})
	r.Event(&loop.TurnComplete{Reason: "tool_calls"})
	r.Event(&loop.ToolExecutionStarted{ID: "call_1", Name: "word_count", Input: json.RawMessage(`{"text":"count these words"}`)})
	r.Event(&loop.ToolExecutionCompleted{ID: "call_1", Name: "word_count", Output: json.RawMessage(`{"words":3}`), Duration: time.Millisecond, Audit: audit})
	r.Message(loop.Message{Role: loop.RoleTool, ToolCallID: "call_1", Name: "word_count", Content: `{"words":3}`})
	for range 8 {
		r.Event(&loop.TextDelta{Text: "three "})
	}
	r.LoopRequest(loop.RequestInfo{Model: "m", Duration: 200 * time.Millisecond, FinishReason: "stop", Usage: loop.Usage{PromptTokens: 70, CompletionTokens: 9}})
	r.Message(loop.Message{Role: loop.RoleAssistant, Content: "three three three three three three three three "})
	r.Event(&loop.TurnComplete{Reason: "stop"})
	r.Finish(nil)
}

// BenchmarkRunTelemetry is what telemetry adds to one run (4 spans, the
// metrics): off (a nil *Telemetry: nil checks) and on (spans batched to
// an exporter that drops them, metrics aggregated), without and with
// capture_content. Figures in docs/OBSERVABILITY.md.
func BenchmarkRunTelemetry(b *testing.B) {
	b.Run("off", func(b *testing.B) {
		var t *Telemetry
		b.ReportAllocs()
		for b.Loop() {
			loopRun(t)
		}
	})
	for _, capture := range []bool{false, true} {
		name := "on"
		if capture {
			name = "on_capture"
		}
		b.Run(name, func(b *testing.B) {
			t, err := setup(context.Background(), Config{CaptureContent: capture}, sdkmetric.NewManualReader(), sdktrace.NewBatchSpanProcessor(discard{}))
			if err != nil {
				b.Fatal(err)
			}
			defer t.Shutdown(context.Background())
			b.ReportAllocs()
			for b.Loop() {
				loopRun(t)
			}
		})
	}
}
