package gemini

import (
	"runtime"
	"strings"
	"testing"

	"github.com/agcore/agrun/loop/internal/wire"
	"google.golang.org/genai"
)

// A thought streamed in many small pieces costs what it weighs: its text
// is built, not concatenated piece by piece (which would copy O(n²)
// bytes: a provider could make the client burn CPU for hours within the
// reply budget).
func TestManyThoughtPiecesAreLinear(t *testing.T) {
	piece := strings.Repeat("t", 64)
	chunk := &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{Content: &genai.Content{Parts: []*genai.Part{{Text: piece, Thought: true}}}}}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a := assembler{budget: wire.Budget{Max: 64 << 20}}
	for range 20000 {
		if _, err := a.add(chunk); err != nil {
			t.Fatal(err)
		}
	}
	sig := &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{FinishReason: genai.FinishReasonStop,
		Content: &genai.Content{Parts: []*genai.Part{{Thought: true, ThoughtSignature: []byte("sig")}, {Text: "answer"}}}}}}
	a.add(sig)
	r := a.reply()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Errorf("20,000 thought pieces of 64 bytes allocated %d MiB", got>>20)
	}
	if r.Reasoning == nil || len(r.Reasoning.Text) != 20000*64 || r.Content != "answer" {
		t.Fatalf("reply %q, reasoning %d bytes", r.Content, len(r.Reasoning.Text))
	}
}
