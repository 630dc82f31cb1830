package mcp

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// upCounter counts the subscriptions an upstream holds per URI.
type upCounter struct {
	mu   sync.Mutex
	held map[string]int
	subs int
}

func (u *upCounter) add(uri string, d int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.held == nil {
		u.held = map[string]int{}
	}
	if d > 0 {
		u.subs++
	}
	u.held[uri] += d
}

func (u *upCounter) get(uri string) (held, subs int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.held[uri], u.subs
}

// subscribeAsync subscribes cs to uri in the background; its answer
// arrives on the channel.
func subscribeAsync(ctx context.Context, cs *sdk.ClientSession, uri string) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}) }()
	return errc
}

// within5s waits up to 5 s for cond.
func within5s(cond func() bool) bool {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestForwardSubscriptionsCancelledWhileQueued: a subscription whose
// request is cancelled while it waits in its resource's queue (behind the
// upstream unsubscription of the same resource) is not taken for
// subscribed upstream: a later session subscribing to the resource has
// agrun subscribe upstream again, and gets its updates.
func TestForwardSubscriptionsCancelledWhileQueued(t *testing.T) {
	const uri = "up://x"
	var cnt upCounter
	release, unsubscribing := make(chan struct{}), make(chan struct{})
	var once sync.Once
	up := subscribableUpstreamWith([]string{uri}, func(_ context.Context, req *sdk.SubscribeRequest) error {
		cnt.add(req.Params.URI, 1)
		return nil
	}, func(ctx context.Context, req *sdk.UnsubscribeRequest) error {
		first := false
		once.Do(func() { first = true; close(unsubscribing) })
		if first {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		cnt.add(req.Params.URI, -1)
		return nil
	})
	srv := NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{upstreamOf(t, up)}, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()

	a := connectClient(t, srv, "2025-11-25", nil, false)
	if err := a.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	unsubscribed := make(chan error, 1)
	go func() { unsubscribed <- a.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: uri}) }()
	<-unsubscribing
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	// B subscribes while the unsubscription is held upstream: its request
	// waits in the queue of x; then B gives up.
	b := connectClient(t, srv, "2025-11-25", nil, false)
	bctx, cancel := context.WithCancel(ctx)
	berr := subscribeAsync(bctx, b, uri)
	time.Sleep(300 * time.Millisecond) // B's request is queued
	cancel()
	if err := <-berr; err == nil {
		t.Fatal("a cancelled subscription was answered")
	}
	time.Sleep(300 * time.Millisecond) // the cancellation reaches agrun's handler

	releaseOnce.Do(func() { close(release) })
	if err := <-unsubscribed; err != nil {
		t.Fatal(err)
	}
	if !within5s(func() bool { h, _ := cnt.get(uri); return h == 0 }) {
		t.Fatal("the unsubscription did not reach the upstream")
	}

	// C subscribes now: the upstream must hold x again.
	c, updates := updatesClient(t, srv, "2025-11-25", 10)
	if err := c.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if !within5s(func() bool { h, _ := cnt.get(uri); return h == 1 }) {
		h, n := cnt.get(uri)
		t.Fatalf("a session is subscribed to %s, yet the upstream holds it %d times (%d subscriptions asked in all)", uri, h, n)
	}
	up.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: uri})
	select {
	case <-updates:
	case <-time.After(5 * time.Second):
		t.Fatal("no update relayed to the subscribed session")
	}
}

// TestForwardSubscriptionsOtherSessionCancels: a session waiting for the
// upstream's answer to another session's subscription of the same resource
// is not refused because that other session gave up.
func TestForwardSubscriptionsOtherSessionCancels(t *testing.T) {
	const uri = "up://x"
	var cnt upCounter
	entered := make(chan struct{}, 10)
	var first sync.Once
	up := subscribableUpstreamWith([]string{uri}, func(ctx context.Context, req *sdk.SubscribeRequest) error {
		hold := false
		first.Do(func() { hold = true })
		entered <- struct{}{}
		if hold {
			<-ctx.Done()
			return ctx.Err()
		}
		cnt.add(req.Params.URI, 1)
		return nil
	}, nil)
	srv := NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{upstreamOf(t, up)}, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()

	a := connectClient(t, srv, "2025-11-25", nil, false)
	b := connectClient(t, srv, "2025-11-25", nil, false)
	actx, cancel := context.WithCancel(ctx)
	aerr := subscribeAsync(actx, a, uri)
	<-entered // A's subscription is with the upstream
	berr := subscribeAsync(ctx, b, uri)
	time.Sleep(300 * time.Millisecond) // B waits for A's answer
	cancel()
	<-aerr
	select {
	case err := <-berr:
		if err != nil {
			t.Fatalf("B refused because A gave up: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B not answered")
	}
	if h, _ := cnt.get(uri); h != 1 {
		t.Fatalf("B subscribed, the upstream holds %s %d times", uri, h)
	}
}

// TestForwardSubscriptionsCancelledAnsweredLate: a subscription whose
// request is cancelled while the upstream has it, and which the upstream
// then takes (it answered too late), is unsubscribed upstream: no session
// holds the resource, so agrun must not keep its upstream subscription.
func TestForwardSubscriptionsCancelledAnsweredLate(t *testing.T) {
	const uri = "up://x"
	var cnt upCounter
	release, entered := make(chan struct{}), make(chan struct{})
	var first sync.Once
	up := subscribableUpstreamWith([]string{uri}, func(_ context.Context, req *sdk.SubscribeRequest) error {
		hold := false
		first.Do(func() { hold = true; close(entered) })
		if hold {
			<-release // slow, and deaf to the cancellation
		}
		cnt.add(req.Params.URI, 1)
		return nil
	}, func(_ context.Context, req *sdk.UnsubscribeRequest) error {
		cnt.add(req.Params.URI, -1)
		return nil
	})
	srv := NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{upstreamOf(t, up)}, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	a := connectClient(t, srv, "2025-11-25", nil, false)
	actx, cancel := context.WithCancel(ctx)
	aerr := subscribeAsync(actx, a, uri)
	<-entered
	cancel()
	if err := <-aerr; err == nil {
		t.Fatal("a cancelled subscription was answered")
	}
	time.Sleep(300 * time.Millisecond) // the cancellation reaches agrun's handler
	releaseOnce.Do(func() { close(release) })
	if !within5s(func() bool { _, n := cnt.get(uri); return n == 1 }) {
		t.Fatal("the upstream never took the subscription")
	}
	if !within5s(func() bool { h, _ := cnt.get(uri); return h == 0 }) {
		t.Fatalf("no session holds %s, yet agrun keeps it subscribed upstream", uri)
	}
}

// TestForwardSubscriptionsSessionEnds: the last session on a resource
// ending without unsubscribing has agrun unsubscribe upstream (docs/MCP.md:
// "dropped when the last session on it ends"), without waiting for some
// other session's next request.
func TestForwardSubscriptionsSessionEnds(t *testing.T) {
	const uri = "up://x"
	var cnt upCounter
	up := subscribableUpstreamWith([]string{uri}, func(_ context.Context, req *sdk.SubscribeRequest) error {
		cnt.add(req.Params.URI, 1)
		return nil
	}, func(_ context.Context, req *sdk.UnsubscribeRequest) error {
		cnt.add(req.Params.URI, -1)
		return nil
	})
	srv := NewServer(registry.New(), &ServerOptions{Upstreams: []*Client{upstreamOf(t, up)}, Logger: slog.New(slog.DiscardHandler)})
	a := connectClient(t, srv, "2025-11-25", nil, false)
	if err := a.Subscribe(context.Background(), &sdk.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if h, _ := cnt.get(uri); h != 1 {
		t.Fatalf("upstream holds %s %d times", uri, h)
	}
	a.Close()
	if !within5s(func() bool { h, _ := cnt.get(uri); return h == 0 }) {
		t.Fatalf("the only session on %s ended; agrun still holds it upstream", uri)
	}
}
