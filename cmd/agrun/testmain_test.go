package main

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/agcore/agrun/internal/testing/providertest"
)

// TestMain runs this package's tests with go test's -parallel at twice
// GOMAXPROCS, unless -parallel was given. Most of its parallel tests
// spend their time waiting, not computing: on the agrun processes they
// start (serve, worker, mcp serve, the documents' shell commands), on a
// Temporal dev server's timers, on a scripted model. At go test's default
// (GOMAXPROCS: 2 on a 2-core machine) two such waits would hold both
// slots while the cores idle; the package is the suite's longest
// (CONTRIBUTING, "Running tests").
func TestMain(m *testing.M) {
	flag.Parse()
	// The test configs' api_key_env: set once for the whole package
	// rather than by t.Setenv in each test, which would keep those tests
	// out of t.Parallel (the package's serial phase was half its time).
	// A test that needs another value, or none, sets its own.
	os.Setenv("AGRUN_TEST_KEY", "k")
	// The model-API tests' key (modelEnv), for the same reason.
	os.Setenv(modelKeyEnv, modelSecret)
	// No config but the one a test names (-c), no serve tokens (serve
	// trusts loopback clients: startServe), and none of the Gemini
	// SDK's own variables, which the Gemini kit would otherwise clear with
	// t.Setenv (providertest.Gemini): the tests that read neither can
	// be parallel.
	for _, k := range append([]string{"AGRUN_CONFIG", "AGRUN_TOKENS"}, providertest.GeminiEnv...) {
		os.Unsetenv(k)
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(2*runtime.GOMAXPROCS(0)))
	}
	os.Exit(m.Run())
}
