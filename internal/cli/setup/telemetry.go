package setup

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/telemetry"
)

// Telemetry starts the OpenTelemetry export [telemetry] asks for
// (or the OTEL_EXPORTER_OTLP_* variables), keeping the span tree when
// tree is set (run --trace). It returns nil (off, no cost) when neither
// asks for anything. The caller calls shutdown at exit: it flushes what
// is pending, within its context's deadline. Export failures are
// warnings logged on log, never a failed command. version is the
// service's version the spans carry.
func Telemetry(ctx context.Context, cfg *config.Config, tree bool, version string, rt *runtime.Runtime, log *slog.Logger) (*telemetry.Telemetry, error) {
	tc := cfg.Telemetry
	headers, err := exportHeaders(tc.HeadersEnv)
	if err != nil {
		return nil, &ConfigError{err}
	}
	tcfg := telemetry.Config{
		Endpoint:       tc.OTLPEndpoint,
		Headers:        headers,
		CaptureContent: tc.CaptureContent,
		Tree:           tree,
		ServiceVersion: version,
	}
	if tc.Sampling != nil {
		tcfg.Sampling = *tc.Sampling
	}
	tel, err := telemetry.Setup(ctx, tcfg)
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("[telemetry]: %w", err)}
	}
	if tel != nil && rt != nil {
		err := tel.ObserveRuntime(func() telemetry.RuntimeStats {
			st := rt.Stats()
			return telemetry.RuntimeStats{InstancesInUse: int64(st.InstancesInUse), InstancesPrepared: st.InstancesPrepared,
				Compiles: st.Compiles, CompileHits: st.CompileHits, PreparedHits: st.PreparedHits}
		})
		if err != nil {
			return nil, fmt.Errorf("%w", err)
		}
	}
	if tel != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("[telemetry]: " + err.Error()) // an export failed, or the SDK refused something
		}))
	}
	return tel, nil
}

// exportHeaders reads the headers of the OTLP export from the variable
// [telemetry] headers_env names: "k=v,k2=v2", values percent-decoded (as
// OTEL_EXPORTER_OTLP_HEADERS is written). An unset or empty variable is no
// headers; a malformed one is an error naming the variable, never its
// value (it holds secrets).
func exportHeaders(env string) (map[string]string, error) {
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
