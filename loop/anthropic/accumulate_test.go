package anthropic

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/agcore/agrun/loop/internal/wire"
	sdk "github.com/anthropics/anthropic-sdk-go/v2"
)

func events(t *testing.T, n int) []sdk.MessageStreamEventUnion {
	t.Helper()
	raw := []string{
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	}
	for range n {
		raw = append(raw, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"0123456789abcdef"}}`)
	}
	raw = append(raw, `{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`, `{"type":"message_stop"}`)
	out := make([]sdk.MessageStreamEventUnion, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal([]byte(r), &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestAccumulateShortfall shows why the adapter assembles streams
// itself: the SDK's Message.Accumulate appends each text delta with +=,
// so a reply of n small deltas costs O(n²) bytes of copying (a provider
// that streams a long reply a few bytes at a time makes the client burn
// CPU and memory), while the assembler's builders cost O(n). If a future
// SDK fixes this, the test fails and Accumulate can be reconsidered.
func TestAccumulateShortfall(t *testing.T) {
	evs := events(t, 4000) // 64 KB of text
	sdkBytes := allocated(func() {
		var m sdk.Message
		for _, ev := range evs {
			if err := m.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
		}
		if len(m.Content) != 1 || len(m.Content[0].Text) != 64000 {
			t.Fatalf("sdk text %d", len(m.Content[0].Text))
		}
	})
	ourBytes := allocated(func() {
		a := assembler{budget: wire.Budget{Max: 64 << 20}}
		for i := range evs {
			if _, err := a.add(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if r := a.reply(); len(r.Content) != 64000 {
			t.Fatalf("assembled text %d", len(r.Content))
		}
	})
	t.Logf("64 KB of text in 4000 deltas: Accumulate allocated %d bytes, the assembler %d", sdkBytes, ourBytes)
	if sdkBytes < 20*ourBytes {
		t.Errorf("Accumulate allocated %d bytes, the assembler %d: no longer quadratic?", sdkBytes, ourBytes)
	}
}
