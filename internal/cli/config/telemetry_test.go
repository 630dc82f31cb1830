package config

import (
	"errors"
	"strings"
	"testing"
)

// [telemetry] decodes strictly; bad values name the key and its line; it
// is off (all zero) by default.
func TestTelemetryKeys(t *testing.T) {
	c, err := Parse("agrun.toml", []byte(`[telemetry]
otlp_endpoint = "http://localhost:4318"
headers_env = "OTLP_HEADERS"
sampling = 0.25
capture_content = true
`))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Telemetry
	if tc.OTLPEndpoint != "http://localhost:4318" || tc.HeadersEnv != "OTLP_HEADERS" || tc.Sampling == nil || *tc.Sampling != 0.25 || !tc.CaptureContent {
		t.Errorf("decoded %+v", tc)
	}
	if d := Default().Telemetry; d.OTLPEndpoint != "" || d.Sampling != nil || d.CaptureContent || d.HeadersEnv != "" {
		t.Errorf("defaults %+v", d)
	}
	for _, tc := range []struct {
		toml, key, msg string
		line           int
	}{
		{"[telemetry]\notlp_endpoint = \"localhost:4318\"\n", "telemetry.otlp_endpoint", "http:// or https://", 2},
		{"[telemetry]\n\nsampling = 0.0\n", "telemetry.sampling", "more than 0", 3},
		{"[telemetry]\nsampling = 2\n", "telemetry.sampling", "", 2},
		{"[telemetry]\nendpoint = \"x\"\n", "telemetry.endpoint", "unknown key", 2},
	} {
		_, err := Parse("agrun.toml", []byte(tc.toml))
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key || ce.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: %v", tc.toml, err)
		}
	}
}
