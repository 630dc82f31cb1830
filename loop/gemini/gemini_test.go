package gemini_test

import (
	"context"
	"strings"
	"testing"

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
