package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// upstreamOf connects an agrun Client named "up" to srv in memory, as
// `[mcp.up] serve_resources = true` would, and returns it.
func upstreamOf(t *testing.T, srv *sdk.Server) *Client {
	t.Helper()
	return upstreamNamed(t, "up", srv)
}

// upstreamNamed is upstreamOf for a server named name.
func upstreamNamed(t *testing.T, name string, srv *sdk.Server) *Client {
	t.Helper()
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cl, err := NewClient(name, SDKTransport{New: func() sdk.Transport { return ct }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(ctx) })
	return cl
}

// TestForwardBinaryBounded: a re-served read or prompt passes binary data
// as bytes up to MaxResourceBlobBytes in all; one byte more, in one item
// or spread over several, is an error, never cut bytes.
func TestForwardBinaryBounded(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, nil)
	blob := func(n int) []byte { return make([]byte, n) }
	read := func(sizes ...int) sdk.ResourceHandler {
		return func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			res := &sdk.ReadResourceResult{}
			for _, n := range sizes {
				res.Contents = append(res.Contents, &sdk.ResourceContents{URI: req.Params.URI, MIMEType: "application/octet-stream\x1b[2J", Blob: blob(n)})
			}
			return res, nil
		}
	}
	up.AddResource(&sdk.Resource{URI: "up://at-cap", Name: "at-cap"}, read(MaxResourceBlobBytes/2, MaxResourceBlobBytes/2))
	up.AddResource(&sdk.Resource{URI: "up://over", Name: "over"}, read(MaxResourceBlobBytes+1))
	up.AddResource(&sdk.Resource{URI: "up://over-in-two", Name: "over-in-two"}, read(MaxResourceBlobBytes/2, MaxResourceBlobBytes/2+1))
	up.AddPrompt(&sdk.Prompt{Name: "picture"}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{
			{Role: "user", Content: &sdk.ImageContent{MIMEType: "image/png", Data: blob(MaxResourceBlobBytes)}},
			{Role: "user", Content: &sdk.AudioContent{MIMEType: "audio/wav", Data: blob(1)}},
		}}, nil
	})
	cs := connectClient(t, NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{upstreamOf(t, up)}}), "", nil, false)
	ctx := context.Background()

	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "up://at-cap"})
	if err != nil {
		t.Fatalf("at the cap: %v", err)
	}
	if len(res.Contents) != 2 || len(res.Contents[0].Blob)+len(res.Contents[1].Blob) != MaxResourceBlobBytes {
		t.Fatalf("at the cap: %d contents", len(res.Contents))
	}
	if m := res.Contents[0].MIMEType; strings.ContainsRune(m, 0x1b) {
		t.Errorf("MIME type not cleaned: %q", m)
	}
	for _, uri := range []string{"up://over", "up://over-in-two"} {
		res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
		if err == nil {
			t.Errorf("%s: read, %d contents", uri, len(res.Contents))
		} else if !strings.Contains(err.Error(), fmt.Sprintf("more than %d bytes of binary data", MaxResourceBlobBytes)) {
			t.Errorf("%s: %v", uri, err)
		}
	}
	if p, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "picture"}); err == nil {
		t.Errorf("a prompt over the cap was served: %d messages", len(p.Messages))
	} else if !strings.Contains(err.Error(), "audio: more than") {
		t.Errorf("prompt: %v", err)
	}
}

// TestForwardCompletionBounded: a re-served completion keeps at most
// MaxCompletionValues values, cleaned, each cut to 1 KiB, empty ones left
// out, and says it has more; one naming nothing served is refused
// without asking the upstream.
func TestForwardCompletionBounded(t *testing.T) {
	var asked sync.Mutex
	n := 0
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, &sdk.ServerOptions{
		CompletionHandler: func(_ context.Context, req *sdk.CompleteRequest) (*sdk.CompleteResult, error) {
			asked.Lock()
			n++
			asked.Unlock()
			vals := []string{"\x1b\a\x00", strings.Repeat("x", 5000), "red\x1b]0;pwned\a"}
			for i := range 200 {
				vals = append(vals, fmt.Sprintf("v%d", i))
			}
			return &sdk.CompleteResult{Completion: sdk.CompletionResultDetails{Values: vals, Total: len(vals)}}, nil
		},
	})
	up.AddPrompt(&sdk.Prompt{Name: "colour", Arguments: []*sdk.PromptArgument{{Name: "c"}}}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{}, nil
	})
	cs := connectClient(t, NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{upstreamOf(t, up)}}), "", nil, false)
	if cs.InitializeResult().Capabilities.Completions == nil {
		t.Fatal("completions not declared though the upstream offers them")
	}
	ctx := context.Background()
	res, err := cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "colour"}, Argument: sdk.CompleteParamsArgument{Name: "c", Value: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	v := res.Completion.Values
	if len(v) != MaxCompletionValues || !res.Completion.HasMore {
		t.Fatalf("%d values, hasMore %v", len(v), res.Completion.HasMore)
	}
	if len(v[0]) > maxCompletionValueBytes || !strings.HasPrefix(v[0], "xxx") {
		t.Errorf("first value %q (the empty one not left out, or not cut)", v[:3])
	}
	if strings.ContainsAny(strings.Join(v, ""), "\x1b\a") {
		t.Errorf("values not cleaned: %q", v[:2])
	}
	if res.Completion.Total != 203 {
		t.Errorf("total %d", res.Completion.Total)
	}
	if _, err := cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "nothing"}, Argument: sdk.CompleteParamsArgument{Name: "c"}}); err == nil {
		t.Error("a completion for a prompt not served was answered")
	}
	asked.Lock()
	defer asked.Unlock()
	if n != 1 {
		t.Errorf("the upstream was asked %d times, want 1", n)
	}
}

// TestForwardTemplatesBounded: more than MaxResourceTemplates templates
// is an error, and a template that is not safe to serve as it is (here:
// over 2 KiB; the SDK's server refuses to send control characters) is
// left out.
func TestForwardTemplatesBounded(t *testing.T) {
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, &sdk.ServerOptions{PageSize: 100})
	h := func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{}, nil
	}
	up.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: "up://bad/" + strings.Repeat("a", maxURIBytes) + "{x}", Name: "bad"}, h)
	up.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: "up://good/{x}", Name: "good\x1b[2J"}, h)
	cl := upstreamOf(t, up)
	ctx := context.Background()
	ts, err := cl.ResourceTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].URITemplate != "up://good/{x}" || strings.ContainsRune(ts[0].Name, 0x1b) {
		t.Fatalf("templates %+v", ts)
	}
	for i := range MaxResourceTemplates {
		up.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: fmt.Sprintf("up://t%d/{x}", i), Name: "t"}, h)
	}
	if ts, err := cl.ResourceTemplates(ctx); err == nil {
		t.Errorf("%d templates listed, want an error past %d", len(ts), MaxResourceTemplates)
	}
}

// TestForwardSubscriptionsBounded: subscriptions are forwarded once per
// resource, at most MaxSubscriptionsPerSession per session, and the
// upstream's updates reach the subscribed session at most
// MaxUpdatesPerSecond a second, the rest coalesced per resource and
// relayed the next second; the last session to leave a resource has it
// unsubscribed upstream. Under both protocols: resources/subscribe
// (2025-11-25), and subscriptions/listen (2026-07-28, SEP-2575), where the
// SDK's client does not wait for the server's answer, so a refusal is seen
// only in what reaches the upstream.
func TestForwardSubscriptionsBounded(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) { testForwardSubscriptions(t, version) })
	}
}

func testForwardSubscriptions(t *testing.T, version string) {
	legacy := version < "2026-07-28"
	var mu sync.Mutex
	upSubs := map[string]int{}
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, &sdk.ServerOptions{
		SubscribeHandler: func(_ context.Context, req *sdk.SubscribeRequest) error {
			mu.Lock()
			defer mu.Unlock()
			upSubs[req.Params.URI]++
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, req *sdk.UnsubscribeRequest) error {
			mu.Lock()
			defer mu.Unlock()
			if upSubs[req.Params.URI]--; upSubs[req.Params.URI] == 0 {
				delete(upSubs, req.Params.URI)
			}
			return nil
		},
	})
	// upstream waits until the upstream's subscriptions are as want says
	// (the count of resources subscribed to, and r0's count), and fails
	// the test if they are not within 5 s.
	upstream := func(what string, want func(n, r0 int) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			n, r0 := len(upSubs), upSubs["up://r0"]
			mu.Unlock()
			if want(n, r0) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: upstream holds %d subscriptions, r0 %d times", what, n, r0)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	h := func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: "x"}}}, nil
	}
	for i := range MaxSubscriptionsPerSession + 1 {
		up.AddResource(&sdk.Resource{URI: fmt.Sprintf("up://r%d", i), Name: "r"}, h)
	}
	srv := NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{upstreamOf(t, up)}, Logger: slog.New(slog.DiscardHandler)})

	ctx := context.Background()
	cs, updates := updatesClient(t, srv, version, 1000)
	if v := cs.InitializeResult().ProtocolVersion; v != version {
		t.Fatalf("protocol %s, want %s", v, version)
	}
	if c := cs.InitializeResult().Capabilities.Resources; c == nil || !c.Subscribe {
		t.Fatalf("subscriptions not declared: %+v", c)
	}
	// A second session on the same resource: one upstream subscription.
	other := connectClient(t, srv, version, nil, false)

	for i := range MaxSubscriptionsPerSession {
		if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: fmt.Sprintf("up://r%d", i)}); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	upstream("the first 100", func(n, r0 int) bool { return n == MaxSubscriptionsPerSession })
	err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: fmt.Sprintf("up://r%d", MaxSubscriptionsPerSession)})
	if legacy && (err == nil || !strings.Contains(err.Error(), "too many subscriptions in this session")) {
		t.Errorf("subscription past the cap: %v", err)
	}
	if err := other.Subscribe(ctx, &sdk.SubscribeParams{URI: "up://r0"}); err != nil {
		t.Fatal(err)
	}
	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "up://nowhere"}); legacy && err == nil {
		t.Error("a resource not served was subscribed to")
	}
	time.Sleep(200 * time.Millisecond) // what is not waited for, under 2026-07-28
	upstream("past the cap, a second session, a resource not served", func(n, r0 int) bool { return n == MaxSubscriptionsPerSession && r0 == 1 })

	// 60 updates of 3 resources at once: 20 relayed now, then one per
	// resource still pending.
	for i := range 60 {
		up.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: fmt.Sprintf("up://r%d", i%3+1)})
	}
	got := 0
	var first time.Time
	deadline := time.After(10 * time.Second)
	for got < MaxUpdatesPerSecond+3 {
		select {
		case <-updates:
			if got++; got == 1 {
				first = time.Now()
			}
			// Past the first second's 20, the coalesced rest waits for
			// the next second (a lower bound: a slow machine only makes
			// it later).
			if got == MaxUpdatesPerSecond+1 {
				if d := time.Since(first); d < 800*time.Millisecond {
					t.Errorf("update %d relayed %s after the first, within the first second", got, d)
				}
			}
		case <-deadline:
			t.Fatalf("%d updates relayed, want %d", got, MaxUpdatesPerSecond+3)
		}
	}
	select {
	case u := <-updates:
		t.Errorf("more than %d updates relayed (another for %s)", MaxUpdatesPerSecond+3, u)
	case <-time.After(1500 * time.Millisecond):
	}

	// The first session unsubscribes from r0: the second still holds it.
	if err := cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "up://r0"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	upstream("one of two sessions left r0", func(n, r0 int) bool { return r0 == 1 })
	if err := other.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "up://r0"}); err != nil {
		t.Fatal(err)
	}
	upstream("both sessions left r0", func(n, r0 int) bool { return r0 == 0 && n == MaxSubscriptionsPerSession-1 })
}

// subscribableUpstream is an upstream server offering the resources uris
// for subscription, whose unsubscribe handler is unsub (nil: accepts).
// It speaks protocol 2025-11-25 at most, as most servers do today: it
// refuses server/discover, so that a client falls back to initialize and
// waits for the answer to each resources/subscribe and unsubscribe
// (under 2026-07-28 the go-sdk's client waits for neither).
func subscribableUpstream(uris []string, unsub func(context.Context, *sdk.UnsubscribeRequest) error) *sdk.Server {
	return subscribableUpstreamWith(uris, nil, unsub)
}

// subscribableUpstreamWith is subscribableUpstream whose subscribe
// handler is sub (nil: accepts).
func subscribableUpstreamWith(uris []string, sub func(context.Context, *sdk.SubscribeRequest) error, unsub func(context.Context, *sdk.UnsubscribeRequest) error) *sdk.Server {
	if sub == nil {
		sub = func(context.Context, *sdk.SubscribeRequest) error { return nil }
	}
	if unsub == nil {
		unsub = func(context.Context, *sdk.UnsubscribeRequest) error { return nil }
	}
	up := sdk.NewServer(&sdk.Implementation{Name: "up"}, &sdk.ServerOptions{
		SubscribeHandler:   sub,
		UnsubscribeHandler: unsub,
	})
	up.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "server/discover" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
			}
			return next(ctx, method, req)
		}
	})
	h := func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: "x"}}}, nil
	}
	for _, uri := range uris {
		up.AddResource(&sdk.Resource{URI: uri, Name: "r"}, h)
	}
	return up
}

// TestForwardSubscriptionsHungUpstream: an upstream that never answers an
// unsubscription holds up neither another session's subscription to a
// resource of another upstream nor the updates relayed from it.
func TestForwardSubscriptionsHungUpstream(t *testing.T) {
	release, unsubscribing := make(chan struct{}), make(chan struct{})
	var returned sync.WaitGroup
	returned.Add(1)
	var once sync.Once
	slow := subscribableUpstream([]string{"slow://x"}, func(ctx context.Context, _ *sdk.UnsubscribeRequest) error {
		defer once.Do(returned.Done)
		close(unsubscribing)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	fast := subscribableUpstream([]string{"fast://y"}, nil)
	srv := NewServer(registry.New(), &ServerOptions{
		Upstreams: []*Client{upstreamNamed(t, "slow", slow), upstreamNamed(t, "fast", fast)},
		Logger:    slog.New(slog.DiscardHandler),
	})
	ctx := context.Background()

	a := connectClient(t, srv, "2025-11-25", nil, false)
	if err := a.Subscribe(ctx, &sdk.SubscribeParams{URI: "slow://x"}); err != nil {
		t.Fatal(err)
	}
	unsubscribed := make(chan error, 1)
	go func() { unsubscribed <- a.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "slow://x"}) }()
	<-unsubscribing

	b, updates := updatesClient(t, srv, "2025-11-25", 10)
	// First of the clean-ups: the sessions' Close waits for the handler.
	t.Cleanup(func() { close(release); returned.Wait() })
	if err := b.Subscribe(ctx, &sdk.SubscribeParams{URI: "fast://y"}); err != nil {
		t.Fatal(err)
	}
	fast.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: "fast://y"})
	select {
	case u := <-updates:
		if u != "fast://y" {
			t.Fatalf("update of %q", u)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no update relayed from the upstream that answers")
	}
	// All that happened while the slow upstream still held the
	// unsubscription (its deadline is unsubscribeTimeout, 10 s).
	select {
	case err := <-unsubscribed:
		t.Fatalf("the hung unsubscription was answered (%v) before the other session was served: the test proves nothing", err)
	default:
	}

}

// TestForwardSubscriptionsTotalCap: past MaxSubscriptions resources
// subscribed upstream, for all sessions, one more is refused; one
// unsubscription makes room again.
func TestForwardSubscriptionsTotalCap(t *testing.T) {
	// Two upstreams: one lists at most MaxResources.
	uris := make([]string, MaxSubscriptions+1)
	for i := range uris {
		uris[i] = fmt.Sprintf("up%d://r%d", i%2, i)
	}
	var half [2][]string
	for i, uri := range uris {
		half[i%2] = append(half[i%2], uri)
	}
	srv := NewServer(registry.New(), &ServerOptions{
		Upstreams: []*Client{upstreamNamed(t, "up0", subscribableUpstream(half[0], nil)), upstreamNamed(t, "up1", subscribableUpstream(half[1], nil))},
		Logger:    slog.New(slog.DiscardHandler),
	})
	ctx := context.Background()
	var sessions []*sdk.ClientSession
	for i := range MaxSubscriptions / MaxSubscriptionsPerSession {
		cs := connectClient(t, srv, "2025-11-25", nil, false)
		sessions = append(sessions, cs)
		for j := range MaxSubscriptionsPerSession {
			if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uris[i*MaxSubscriptionsPerSession+j]}); err != nil {
				t.Fatalf("subscription %d of session %d: %v", j, i, err)
			}
		}
	}
	last := connectClient(t, srv, "2025-11-25", nil, false)
	err := last.Subscribe(ctx, &sdk.SubscribeParams{URI: uris[MaxSubscriptions]})
	if err == nil || !strings.Contains(err.Error(), "too many subscriptions (the server keeps at most 1000)") {
		t.Fatalf("subscription %d: %v, want refused", MaxSubscriptions+1, err)
	}
	// A resource already subscribed upstream costs nothing more.
	if err := last.Subscribe(ctx, &sdk.SubscribeParams{URI: uris[0]}); err != nil {
		t.Fatalf("a second session on a subscribed resource: %v", err)
	}
	if err := sessions[1].Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: uris[MaxSubscriptionsPerSession]}); err != nil {
		t.Fatal(err)
	}
	if err := last.Subscribe(ctx, &sdk.SubscribeParams{URI: uris[MaxSubscriptions]}); err != nil {
		t.Fatalf("after an unsubscription: %v", err)
	}
}

// TestForwardSubscriptionsSessionCapConcurrent: a session's subscriptions
// still waiting for the upstream count against its cap, so requests made
// at once cannot pass MaxSubscriptionsPerSession together.
func TestForwardSubscriptionsSessionCapConcurrent(t *testing.T) {
	uris := make([]string, MaxSubscriptionsPerSession+4)
	for i := range uris {
		uris[i] = fmt.Sprintf("up://r%d", i)
	}
	release, entered := make(chan struct{}), make(chan string, len(uris))
	slowFrom := MaxSubscriptionsPerSession - 1
	up := subscribableUpstreamWith(uris, func(ctx context.Context, req *sdk.SubscribeRequest) error {
		var i int
		fmt.Sscanf(req.Params.URI, "up://r%d", &i)
		if i >= slowFrom {
			entered <- req.Params.URI
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}, nil)
	srv := NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{upstreamOf(t, up)}, Logger: slog.New(slog.DiscardHandler)})
	cs := connectClient(t, srv, "2025-11-25", nil, false)
	ctx := context.Background()
	for _, uri := range uris[:slowFrom] {
		if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	// One slot left; five requests at once. The one that reaches the
	// upstream first holds it until released; the others are refused
	// meanwhile.
	t.Cleanup(func() { close(release) })
	errs := make(chan error, 5)
	for _, uri := range uris[slowFrom:] {
		go func() { errs <- cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}) }()
	}
	<-entered
	for range 4 {
		select {
		case err := <-errs:
			if err == nil || !strings.Contains(err.Error(), "too many subscriptions in this session") {
				t.Fatalf("a request past the cap while another waited: %v", err)
			}
		case uri := <-entered:
			t.Fatalf("a second request (%s) reached the upstream past the session's cap", uri)
		case <-time.After(10 * time.Second):
			t.Fatal("a request past the cap was neither refused nor sent upstream")
		}
	}
}

// updatesClient connects a client session to srv under protocol version
// that sends each resource update it is notified of to updates (room
// for buf of them); both ends close with the test.
func updatesClient(t *testing.T, srv *sdk.Server, version string, buf int) (_ *sdk.ClientSession, updates chan string) {
	t.Helper()
	ctx := context.Background()
	updates = make(chan string, buf)
	st, ct := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "c"}, &sdk.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *sdk.ResourceUpdatedNotificationRequest) { updates <- req.Params.URI },
	}).Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, updates
}
