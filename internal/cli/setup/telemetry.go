package setup

import (
	"fmt"
	"net/url"
	"os"
	"strings"
)

// ExportHeaders reads the headers of the OTLP export from the variable
// [telemetry] headers_env names: "k=v,k2=v2", values percent-decoded (as
// OTEL_EXPORTER_OTLP_HEADERS is written). An unset or empty variable is no
// headers; a malformed one is an error naming the variable, never its
// value (it holds secrets).
func ExportHeaders(env string) (map[string]string, error) {
	if env == "" {
		return nil, nil
	}
	raw := strings.TrimSpace(os.Getenv(env))
	if raw == "" {
		return nil, nil
	}
	h := map[string]string{}
	for i, part := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("$%s ([telemetry] headers_env): entry %d is not key=value (want \"k=v,k2=v2\")", env, i+1)
		}
		if dv, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
			v = dv
		}
		h[k] = strings.TrimSpace(v)
	}
	return h, nil
}
