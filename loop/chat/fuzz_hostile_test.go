package chat

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
)

// FuzzAssemble feeds a Chat Completions stream, as the SSE body a provider
// sends ("data: {chunk}" lines), through the stream assembler and the
// non-streamed reader. Whatever the provider sends, neither panics, the
// assembler holds no more than maxReplyBytes, and every assembled call has
// a name or arguments. Seeds: the provider-quirk fixtures in loop/testdata/*.sse
// and testdata/fuzz/FuzzAssemble. (Part of the hostile-input suite; see
// internal/testing/hostile and docs/SECURITY.md.)
func FuzzAssemble(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "*.sse"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		a := assembler{max: 64 << 20}
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok || strings.TrimSpace(data) == "[DONE]" {
				continue
			}
			var chunk openai.ChatCompletionChunk
			if json.Unmarshal([]byte(data), &chunk) != nil {
				continue
			}
			if _, err := a.add(&chunk); err != nil {
				break
			}
			// The same bytes as a whole (non-streamed) completion.
			var cc openai.ChatCompletion
			if json.Unmarshal([]byte(data), &cc) == nil {
				replyFromCompletion(&cc)
			}
		}
		if a.size > a.max+fragmentCost+len(body) {
			t.Fatalf("assembler holds %d bytes", a.size)
		}
		r := a.result()
		for i, c := range r.Calls {
			if c.Name == "" && c.Arguments == "" {
				t.Fatalf("call %d is empty: %+v", i, c)
			}
		}
		if utf8.Valid(body) && !utf8.ValidString(r.Content) {
			t.Fatalf("valid UTF-8 in, invalid content out: %q", r.Content)
		}
	})
}
