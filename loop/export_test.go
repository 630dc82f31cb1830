package loop

import "net/http"

// NewTestProvider makes the provider of this package's tests. It is set
// by hook_test.go, in package loop_test, to chat.New: package loop's own
// tests cannot import loop/chat (it imports loop), but the test binary
// builds both, so the tests run over the real Chat Completions adapter
// against chattest servers.
var NewTestProvider func(TestProviderConfig) (Provider, error)

// TestProviderConfig is chat.Config, for NewTestProvider.
type TestProviderConfig struct {
	BaseURL, APIKey, Model string
	Temperature            *float64
	ParallelToolCalls      *bool
	Reasoning              string
	HTTPClient             *http.Client
}
