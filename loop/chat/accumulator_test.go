package chat

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agcore/agrun/loop"
	"github.com/openai/openai-go/v3"
)

// These tests document why the loop assembles streams itself: each feeds a
// fixture to openai-go's ChatCompletionAccumulator and shows what it gets
// wrong, next to what the loop's assembler makes of the same chunks. If a
// future openai-go fixes a case, its test fails and the assembler can be
// reconsidered.

// fixtureChunks decodes testdata/<name> into chunks, stopping at [DONE].
func fixtureChunks(t *testing.T, name string) []openai.ChatCompletionChunk {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var chunks []openai.ChatCompletionChunk
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok || bytes.Equal(line, []byte("[DONE]")) {
			continue
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
	}
	return chunks
}

func accumulate(t *testing.T, name string) (acc openai.ChatCompletionAccumulator, justFinished int) {
	t.Helper()
	for _, c := range fixtureChunks(t, name) {
		if !acc.AddChunk(c) {
			t.Logf("accumulator rejected a chunk of %s", name)
		}
		if _, ok := acc.JustFinishedToolCall(); ok {
			justFinished++
		}
	}
	return acc, justFinished
}

func assemble(t *testing.T, name string) *loop.Reply {
	t.Helper()
	var a assembler
	for _, c := range fixtureChunks(t, name) {
		if _, err := a.add(&c); err != nil {
			t.Fatal(err)
		}
	}
	return a.result()
}

func TestAccumulatorShortfallIndexStartsAtOne(t *testing.T) {
	acc, _ := accumulate(t, "index_starts_at_1.sse")
	calls := acc.Choices[0].Message.ToolCalls
	if len(calls) != 2 || calls[0].ID != "" || calls[0].Function.Name != "" {
		t.Errorf("accumulator: want an empty entry 0 before the call, got %+v", calls)
	}
	got := assemble(t, "index_starts_at_1.sse")
	if len(got.Calls) != 1 || got.Calls[0].ID != "toolu_01XYZ" {
		t.Errorf("assembler: %+v", got.Calls)
	}
}

func TestAccumulatorShortfallAllAtIndexZero(t *testing.T) {
	acc, _ := accumulate(t, "index0_different_ids.sse")
	calls := acc.Choices[0].Message.ToolCalls
	if len(calls) != 1 || calls[0].Function.Arguments != `{"text":"alpha"}{"text":"beta gamma"}` ||
		calls[0].Function.Name != "word_countword_count" {
		t.Errorf("accumulator: want the two calls glued into one, got %+v", calls)
	}
	got := assemble(t, "index0_different_ids.sse")
	if len(got.Calls) != 2 || got.Calls[1].ID != "call_B" || got.Calls[1].Arguments != `{"text":"beta gamma"}` {
		t.Errorf("assembler: %+v", got.Calls)
	}
}

func TestAccumulatorShortfallNoIndexNoType(t *testing.T) {
	acc, justFinished := accumulate(t, "mistral_no_index_no_type.sse")
	calls := acc.Choices[0].Message.ToolCalls
	// Both calls land on index 0: one call, the second id wins, arguments glued.
	if len(calls) != 1 {
		t.Errorf("accumulator: want the calls merged, got %d", len(calls))
	}
	// finish_reason arrives with the calls: JustFinishedToolCall never fires.
	if justFinished != 0 {
		t.Errorf("accumulator: JustFinishedToolCall fired %d times", justFinished)
	}
	// No "type": ToParam drops the call.
	p := acc.Choices[0].Message.ToParam()
	if p.OfAssistant == nil || len(p.OfAssistant.ToolCalls) != 1 || p.OfAssistant.ToolCalls[0].OfFunction != nil {
		t.Errorf("accumulator: want ToParam to drop the untyped call, got %+v", p.OfAssistant)
	}
	got := assemble(t, "mistral_no_index_no_type.sse")
	if len(got.Calls) != 2 || got.Calls[0].ID != "Xy12AbC9d" || got.Calls[1].ID != "Pq34RsT8u" || got.FinishReason != "tool_calls" {
		t.Errorf("assembler: %+v", got)
	}
}

func TestAccumulatorShortfallNameRepeated(t *testing.T) {
	acc, _ := accumulate(t, "name_repeated.sse")
	calls := acc.Choices[0].Message.ToolCalls
	if len(calls) != 1 || calls[0].Function.Name != "word_countword_countword_count" {
		t.Errorf("accumulator: want the repeated name concatenated, got %+v", calls)
	}
	got := assemble(t, "name_repeated.sse")
	if len(got.Calls) != 1 || got.Calls[0].Name != "word_count" {
		t.Errorf("assembler: %+v", got.Calls)
	}
}

func TestAccumulatorShortfallNoIndexNoID(t *testing.T) {
	acc, _ := accumulate(t, "no_index_no_id.sse")
	if calls := acc.Choices[0].Message.ToolCalls; len(calls) != 1 {
		t.Errorf("accumulator: want the two whole calls merged, got %+v", calls)
	}
	got := assemble(t, "no_index_no_id.sse")
	if len(got.Calls) != 2 || got.Calls[1].Arguments != `{"text":"q r"}` {
		t.Errorf("assembler: %+v", got.Calls)
	}
}

func TestAccumulatorShortfallChunkIDChanges(t *testing.T) {
	// Some servers give every chunk its own id; the accumulator rejects
	// every chunk after the first.
	mk := func(id, content string) openai.ChatCompletionChunk {
		var c openai.ChatCompletionChunk
		raw := `{"id":"` + id + `","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` + content + `"}}]}`
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	var acc openai.ChatCompletionAccumulator
	var a assembler
	for i, c := range []openai.ChatCompletionChunk{mk("a", "Hel"), mk("b", "lo")} {
		ok := acc.AddChunk(c)
		if i == 1 && ok {
			t.Errorf("accumulator accepted a chunk with a new id")
		}
		if _, err := a.add(&c); err != nil {
			t.Fatal(err)
		}
	}
	if acc.Choices[0].Message.Content != "Hel" {
		t.Errorf("accumulator content %q", acc.Choices[0].Message.Content)
	}
	if got := a.result().Content; got != "Hello" {
		t.Errorf("assembler content %q", got)
	}
}

func TestJSONEnd(t *testing.T) {
	for _, c := range []struct {
		parts []string
		want  bool
	}{
		{[]string{`{"a":1}`}, true},
		{[]string{`{"a":`, `1}`}, true},
		{[]string{`{"a":"}"`}, false},
		{[]string{`{"a":"\"}`, `"}`}, true},
		{[]string{`[1,{"b":[2]}]`}, true},
		{[]string{`{"a":{"b":1}`}, false},
		{[]string{`  `}, false},
	} {
		var j jsonEnd
		for _, p := range c.parts {
			j.write(p)
		}
		if j.complete() != c.want {
			t.Errorf("%q: complete %v", c.parts, j.complete())
		}
	}
}

// BenchmarkManyFragments: a call streamed as many fragments that each
// repeat the name (as some servers do) and never complete its JSON costs
// linear time in the fragments (docs/SECURITY.md, "Model output").
func BenchmarkManyFragments(b *testing.B) {
	mk := func(args string) openai.ChatCompletionChunk {
		var c openai.ChatCompletionChunk
		raw := `{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"f","arguments":` + strconv.Quote(args) + `}}]}}]}`
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			b.Fatal(err)
		}
		return c
	}
	first, next := mk(`{"a":"`), mk(strings.Repeat("a", 64))
	for b.Loop() {
		a := assembler{max: 64 << 20}
		a.add(&first)
		for range 16000 {
			a.add(&next)
		}
	}
}
