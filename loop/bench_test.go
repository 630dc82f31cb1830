//go:build unix

package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/registry"
)

// The benchmarks measure the loop's own cost per turn: building the
// request from the history, openai-go's encoding and decoding, stream
// assembly, the registry call, history and events. The server answers
// from canned bytes and the tool returns a constant, so what remains above
// BenchmarkBaselineHTTP (the same two HTTP exchanges made with plain
// net/http) is the loop's overhead.
//
//	go test -run '^$' -bench . -benchmem ./loop
//
// Besides wall time per turn (ns/turn), each reports the process CPU time
// per turn (cpu-ns/turn, client and server together, from getrusage),
// which moves less with the load of a shared machine.

const benchToolCallJSON = `{"id":"b","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"word_count","arguments":"{\"text\":\"one two three four\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120}}`
const benchAnswerJSON = `{"id":"b","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"There are four words in the text you gave me."},"finish_reason":"stop"}],"usage":{"prompt_tokens":130,"completion_tokens":12,"total_tokens":142}}`

func benchSSE(chunks ...string) []byte {
	var b bytes.Buffer
	for _, c := range chunks {
		fmt.Fprintf(&b, "data: %s\n\n", c)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

var (
	benchToolCallSSE = benchSSE(
		`{"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]}`,
		`{"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"word_count","arguments":""}}]},"finish_reason":null}]}`,
		`{"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"text\":"}}]},"finish_reason":null}]}`,
		`{"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"one two three four\"}"}}]},"finish_reason":null}]}`,
		`{"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120}}`,
	)
	benchAnswerSSE = func() []byte {
		chunks := []string{`{"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`}
		for _, w := range strings.Fields("There are four words in the text you gave me.") {
			chunks = append(chunks, textChunk(w+" "))
		}
		chunks = append(chunks, stopChunk)
		return benchSSE(chunks...)
	}()
)

// benchServer answers a request whose last message is a tool message with
// the final answer, any other with a tool call. It writes fixed bytes on
// purpose and is not chattest (see server_test.go): chattest decodes every
// request and encodes every reply, and that would count in the benchmark.
func benchServer(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		stream := bytes.Contains(body, []byte(`"stream":true`))
		last := bytes.LastIndex(body, []byte(`"role":`))
		answer := last >= 0 && bytes.HasPrefix(body[last:], []byte(`"role":"tool"`))
		switch {
		case stream && answer:
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(benchAnswerSSE)
		case stream:
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(benchToolCallSSE)
		case answer:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, benchAnswerJSON)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, benchToolCallJSON)
		}
	}))
	b.Cleanup(srv.Close)
	return srv
}

func BenchmarkTurn(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			srv := benchServer(b)
			reg := benchRegistry(b)
			ctx := context.Background()
			b.ReportAllocs()
			cpu := cpuTime()
			p, err := NewTestProvider(TestProviderConfig{BaseURL: srv.URL + "/v1", Model: "m"})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				c, err := New(Config{Provider: p, System: "You count words."})
				if err != nil {
					b.Fatal(err)
				}
				if stream {
					for _, err := range c.SubmitStreamWithTools(ctx, "How many words in: one two three four?", reg) {
						if err != nil {
							b.Fatal(err)
						}
					}
				} else if _, err := c.SubmitWithTools(ctx, "How many words in: one two three four?", reg); err != nil {
					b.Fatal(err)
				}
			}
			reportPerTurn(b, cpu)
		})
	}
}

// BenchmarkBaselineHTTP makes the same two exchanges per op with plain
// net/http and a similar request body: the floor the loop cannot go under.
func BenchmarkBaselineHTTP(b *testing.B) {
	srv := benchServer(b)
	first, _ := json.Marshal(map[string]any{"model": "m", "messages": []any{
		map[string]any{"role": "system", "content": "You count words."},
		map[string]any{"role": "user", "content": "How many words in: one two three four?"},
	}})
	second := bytes.Replace(first, []byte(`]}`), []byte(`,{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"word_count","arguments":"{\"text\":\"one two three four\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"{\"words\":4}"}]}`), 1)
	client := &http.Client{}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		for _, body := range [][]byte{first, second} {
			res, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			var v map[string]any
			if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
				b.Fatal(err)
			}
			res.Body.Close()
		}
	}
	reportPerTurn(b, cpu)
}

// cpuTime is the CPU time (user + system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportPerTurn reports wall and CPU time per turn (two turns per op).
func reportPerTurn(b *testing.B, cpuStart time.Duration) {
	turns := float64(2 * b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/turns, "ns/turn")
	b.ReportMetric(float64((cpuTime()-cpuStart).Nanoseconds())/turns, "cpu-ns/turn")
}

func benchRegistry(b *testing.B) *registry.Registry {
	b.Helper()
	reg := registry.New()
	if err := reg.Register(&funcTool{name: "word_count", desc: "Count the words of a text",
		params: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		fn: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"words":4}`), nil
		}}); err != nil {
		b.Fatal(err)
	}
	return reg
}
