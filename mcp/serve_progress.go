package mcp

import (
	"context"
	"fmt"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultProgressInterval is how often `agrun mcp serve` tells a client
// that a call it asked progress for is still running
// (ServerOptions.ProgressInterval).
const DefaultProgressInterval = 2 * time.Second

// minRelayGap bounds the progress notifications relayed from an upstream
// server for one call: at most one per 100 ms (the others are dropped;
// the next one carries the news), so an upstream cannot flood a client
// through agrun.
const minRelayGap = 100 * time.Millisecond

// progressKey is the context key of a call's progress sink: a Client
// whose CallTool runs in such a context asks its server for progress and
// hands what comes to the sink (ServerOptions: an upstream's progress
// reaches the downstream client).
type progressKey struct{}

// withProgress is ctx with sink as its calls' progress sink.
func withProgress(ctx context.Context, sink func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, sink)
}

// progressSink is ctx's progress sink, or nil.
func progressSink(ctx context.Context) func(Progress) {
	f, _ := ctx.Value(progressKey{}).(func(Progress))
	return f
}

// callProgress sends the progress notifications of one tools/call that
// a client gave a progress token: a heartbeat ("still running") every
// interval while the tool runs, or, for a tool of an upstream MCP server
// that reports progress itself, that progress relayed (the upstream's
// values, cleaned by Client). Values only ever increase, as MCP requires:
// a relayed value not above the last one sent is dropped, and once the
// upstream has reported, heartbeats stop.
type callProgress struct {
	ss    *sdk.ServerSession
	token any
	start time.Time

	mu      sync.Mutex
	sent    bool
	last    float64
	lastAt  time.Time
	relayed bool
}

// startProgress starts the heartbeat of a call, if req asks for
// progress, and returns the call's context (carrying the relay sink) and
// the function that stops it when the call returns. interval <= 0: no
// heartbeat (progress is still relayed).
func startProgress(ctx context.Context, req *sdk.CallToolRequest, interval time.Duration) (context.Context, func()) {
	if req == nil || req.Params == nil || req.Session == nil {
		return ctx, func() {}
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return ctx, func() {}
	}
	p := &callProgress{ss: req.Session, token: token, start: time.Now()}
	ctx, cancel := context.WithCancel(ctx)
	ctx = withProgress(ctx, p.relay(ctx))
	var wg sync.WaitGroup
	if interval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.heartbeat(ctx, interval)
		}()
	}
	return ctx, func() {
		cancel()
		wg.Wait() // no notification for this token after the result
	}
}

// heartbeat sends the elapsed seconds (to the millisecond) every
// interval until ctx ends,
// unless the upstream reports progress itself.
func (p *callProgress) heartbeat(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			secs := float64(now.Sub(p.start).Milliseconds()) / 1000
			p.send(ctx, false, secs, 0, fmt.Sprintf("still running (%.0f s)", secs))
		}
	}
}

// relay is the sink handing an upstream's progress on.
func (p *callProgress) relay(ctx context.Context) func(Progress) {
	return func(pr Progress) {
		p.send(ctx, true, pr.Progress, pr.Total, pr.Message)
	}
}

// send sends one notification, unless it would not increase the value,
// is a heartbeat after the upstream reported, or is a relay within
// minRelayGap of the last one or while another is being sent (a relay
// runs on the upstream Client's notification goroutine, which a slow
// downstream client must not hold up).
func (p *callProgress) send(ctx context.Context, relayed bool, progress, total float64, msg string) {
	if relayed {
		if !p.mu.TryLock() {
			return
		}
	} else {
		p.mu.Lock()
	}
	defer p.mu.Unlock() // held while sending: notifications go out in order
	if ctx.Err() != nil || (p.sent && progress <= p.last) || (!relayed && p.relayed) {
		return
	}
	now := time.Now()
	if relayed {
		p.relayed = true
		if p.sent && now.Sub(p.lastAt) < minRelayGap {
			return
		}
	}
	p.sent, p.last, p.lastAt = true, progress, now
	// A client that went away makes this fail; the call itself goes on.
	_ = p.ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: progress, Total: total, Message: SanitizeText(msg, 200)})
}

// progressCall is a Client's call in progress: its registry name and
// where its progress goes besides ClientOptions.Progress.
type progressCall struct {
	tool string
	sink func(Progress) // nil: only ClientOptions.Progress
}
