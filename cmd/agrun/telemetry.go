package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/telemetry"
)

// telemetryFlushTimeout bounds the export of what is pending at exit.
const telemetryFlushTimeout = 5 * time.Second

// setupTelemetry starts the OpenTelemetry export [telemetry] asks for
// (or the OTEL_EXPORTER_OTLP_* variables), keeping the span tree when
// tree is set (run --trace). It returns nil (off, no cost) when neither
// asks for anything. The caller calls shutdown at exit: it flushes what
// is pending, for at most telemetryFlushTimeout. Export failures are
// warnings on stderr, never a failed command.
func (c *cli) setupTelemetry(ctx context.Context, cfg *config.Config, tree bool, rt *runtime.Runtime) (*telemetry.Telemetry, error) {
	tc := cfg.Telemetry
	headers, err := setup.ExportHeaders(tc.HeadersEnv)
	if err != nil {
		return nil, &configError{err}
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
		return nil, &configError{fmt.Errorf("[telemetry]: %w", err)}
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
		log := c.logger()
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("telemetry: " + err.Error())
		}))
	}
	return tel, nil
}

// shutdownTelemetry flushes and stops tel (nil: nothing to do).
func (c *cli) shutdownTelemetry(tel *telemetry.Telemetry) {
	if tel == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		fmt.Fprintf(c.stderr, "agrun: warning: telemetry: %s\n", safe(err.Error()))
	}
}
