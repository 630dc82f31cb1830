package gemini_test

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/geminitest"
	"github.com/agcore/agrun/internal/testing/providertest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/gemini"
)

func TestSuite(t *testing.T) { providertest.Run(t, providertest.Gemini) }

// genai reads GEMINI_API_KEY (and GOOGLE_API_KEY) when it is given no key:
// a provider made without one must not send a key the caller did not
// choose.
func TestNoKeyReadsNoEnvironment(t *testing.T) {
	f := providertest.Gemini.Serve(t, providertest.Step{Text: "hi"})
	t.Setenv("GEMINI_API_KEY", "env-secret")
	t.Setenv("GOOGLE_API_KEY", "env-secret-2")
	p, err := gemini.New(gemini.Config{BaseURL: f.URL(), Model: "gemini-2.5-flash"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	c.Submit(context.Background(), "hi") // the fake refuses a request without a key: 403
	if f.Requests() != 1 {
		t.Fatalf("%d requests", f.Requests())
	}
	for name, v := range f.Header(0) {
		if strings.Contains(strings.Join(v, ","), "env-secret") {
			t.Errorf("%s carries the environment's key", name)
		}
	}
	if strings.Contains(string(f.Body(0)), "env-secret") {
		t.Errorf("the body carries the environment's key")
	}
}

// One chunk whose JSON is a long array of small values (which genai
// decodes into map[string]any, at up to a hundred times its bytes) is
// refused before genai decodes it.
func TestManyValuesInOneChunkRefused(t *testing.T) {
	args := "[" + strings.Repeat("0,", 8<<20) + "0]" // 16 MiB: genai alone would allocate gigabytes
	events := `data: {"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{"a":` + args + `}}}]},"finishReason":"STOP"}]}` + "\r\n\r\n"
	for _, k := range []string{"GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"} {
		t.Setenv(k, "")
	}
	srv := geminitest.New(t, geminitest.Reply{Events: events})
	p, err := gemini.New(gemini.Config{BaseURL: srv.URL, APIKey: "k", Model: "gemini-2.5-flash"})
	if err != nil {
		t.Fatal(err)
	}
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	_, err = p.Request(context.Background(), &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, Stream: true, MaxReplyBytes: 64 << 20})
	goruntime.ReadMemStats(&after)
	if !errors.Is(err, loop.ErrBadResponse) {
		t.Fatalf("err = %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<20 {
		t.Errorf("the request allocated %d MiB", got>>20)
	}
	if len(err.Error()) > 2048 {
		t.Errorf("the error quotes the chunk: %d bytes", len(err.Error()))
	}
}
