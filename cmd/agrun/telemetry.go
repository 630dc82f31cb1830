package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/telemetry"
)

// telemetryFlushTimeout bounds the export of what is pending at exit.
const telemetryFlushTimeout = 5 * time.Second

// setupTelemetry starts the OpenTelemetry export [telemetry] asks for
// (setup.Telemetry), keeping the span tree when tree is set (run
// --trace); nil when nothing asks for it. e's MCP clients record their
// requests in it from then on (setup.Env.UseTelemetry). The caller calls
// shutdownTelemetry at exit.
func (c *cli) setupTelemetry(ctx context.Context, e *env, tree bool) (*telemetry.Telemetry, error) {
	tel, err := setup.Telemetry(ctx, e.cfg, tree, version, e.rt, c.logger())
	if err != nil {
		return nil, err
	}
	e.UseTelemetry(tel)
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
