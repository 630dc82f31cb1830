package telemetry

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ratioKeeps is the rule docs/CONFIG.md ([telemetry] sampling) and
// docs/OBSERVABILITY.md ("Privacy") promise, written out: the ratio
// applied to the trace ID, as OpenTelemetry's TraceIDRatioBased does (the
// trace ID's low 63 bits below ratio × 2^63), whatever the caller's
// sampled flag says.
func ratioKeeps(ratio float64, id trace.TraceID) bool {
	if ratio >= 1 {
		return true
	}
	return binary.BigEndian.Uint64(id[8:16])>>1 < uint64(ratio*(1<<63))
}

// TestSamplingIgnoresCallersFlag: the [telemetry] sampling ratio, not the
// sampled flag of a serve client's traceparent, decides whether its run
// and its direct tool call are traced, applied to the caller's trace ID;
// a traced one is a child of the caller's span in the caller's trace, and
// a run's own spans (its tool calls) follow the run's decision. With a
// ratio of 1e-9 a sampled=01 parent does not force a trace; with 1 a
// sampled=00 parent does not hide one.
func TestSamplingIgnoresCallersFlag(t *testing.T) {
	const parentSpan = "00f067aa0ba902b7"
	// Trace IDs whose decision is known at every ratio: low half zero is
	// kept by any ratio above 0, low half all ones dropped by any under 1.
	kept, _ := trace.TraceIDFromHex("4bf92f3577b34da60000000000000000")
	dropped, _ := trace.TraceIDFromHex("4bf92f3577b34da6ffffffffffffffff")
	rng := rand.New(rand.NewPCG(31, 32)) // many more, the same every run
	ids := []trace.TraceID{kept, dropped}
	for range 300 {
		var id trace.TraceID
		binary.BigEndian.PutUint64(id[:8], rng.Uint64())
		binary.BigEndian.PutUint64(id[8:], rng.Uint64())
		ids = append(ids, id)
	}

	for _, ratio := range []float64{1e-9, 0.5, 1} {
		t.Run(fmt.Sprint(ratio), func(t *testing.T) {
			tel, rec, _ := record(t, Config{Sampling: ratio})
			type outcome struct{ flag, traced bool }
			seen := map[outcome]int{}
			for i, id := range ids {
				for _, sampled := range []bool{true, false} {
					flags := "00"
					if sampled {
						flags = "01"
					}
					// As agrun serve reads a request (server.traceContext).
					h := http.Header{}
					h.Set("Traceparent", "00-"+id.String()+"-"+parentSpan+"-"+flags)
					ctx := Propagator.Extract(context.Background(), propagation.HeaderCarrier(h))
					if sc := trace.SpanContextFromContext(ctx); !sc.IsRemote() || sc.TraceID() != id || sc.IsSampled() != sampled {
						t.Fatalf("traceparent %s read as %+v", h.Get("Traceparent"), sc)
					}
					before := len(rec.Ended())
					_, run := tel.StartRun(ctx, RunInfo{Session: fmt.Sprintf("s%d", i), Provider: deepseek})
					callID := "call_" + flags
					run.ToolStarted(callID, "word_count", []byte(`{}`))
					run.ToolCompleted(Tool{ID: callID, Name: "word_count", Duration: time.Millisecond, Output: []byte(`{}`)})
					run.Finish(nil)
					tel.Call(ctx, time.Now(), []byte(`{}`), Tool{Name: "word_count", Output: []byte(`{}`)}) // POST /v1/tools/{name}/call
					spans := rec.Ended()[before:]

					want := ratioKeeps(ratio, id)
					if id == kept && !want || id == dropped && want != (ratio >= 1) {
						t.Fatalf("ratioKeeps(%v, %s) = %v", ratio, id, want)
					}
					seen[outcome{sampled, want}]++
					n := 0
					if want {
						n = 3 // the run, its tool call, the direct call
					}
					if len(spans) != n {
						t.Fatalf("trace %s, sampled=%s, ratio %v: %d spans recorded, want %d (the ratio decides, not the flag)", id, flags, ratio, len(spans), n)
					}
					for _, s := range spans {
						if s.SpanContext().TraceID() != id {
							t.Errorf("%s: trace %s, want the caller's %s", s.Name(), s.SpanContext().TraceID(), id)
						}
					}
					if n == 3 {
						byN := byName(spans)
						runSpan, direct := byN["invoke_agent agrun"], byN["execute_tool word_count"]
						if len(runSpan) != 1 || len(direct) != 2 {
							t.Fatalf("spans %v", byN)
						}
						if p := direct[0].Parent(); p.SpanID() != runSpan[0].SpanContext().SpanID() {
							t.Errorf("the run's tool call: parent %s, want the run's span", p.SpanID())
						}
						for _, s := range []sdktrace.ReadOnlySpan{runSpan[0], direct[1]} {
							if p := s.Parent(); p.SpanID().String() != parentSpan || !p.IsRemote() {
								t.Errorf("%s: parent %s (remote %v), want the caller's span %s", s.Name(), p.SpanID(), p.IsRemote(), parentSpan)
							}
						}
					}
				}
			}
			// Not vacuous: each ratio met what it should have.
			switch ratio {
			case 1e-9:
				if seen[outcome{true, true}] != 1 || seen[outcome{false, true}] != 1 || seen[outcome{true, false}] != len(ids)-1 {
					t.Errorf("ratio 1e-9: outcomes %v: want only the kept id traced, whatever its flag", seen)
				}
			case 0.5:
				for _, o := range []outcome{{true, true}, {true, false}, {false, true}, {false, false}} {
					if seen[o] == 0 {
						t.Errorf("ratio 0.5: no case with sampled=%v traced=%v: %v", o.flag, o.traced, seen)
					}
				}
			case 1:
				if seen[outcome{false, true}] != len(ids) {
					t.Errorf("ratio 1: outcomes %v: want every sampled=00 parent traced", seen)
				}
			}
		})
	}
}
