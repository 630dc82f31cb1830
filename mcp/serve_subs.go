package mcp

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of the resource subscriptions `agrun mcp serve` forwards.
const (
	// MaxSubscriptionsPerSession bounds the resources one client session
	// is subscribed to at once, and MaxSubscriptions the resources
	// subscribed to upstream, for all sessions; a subscription past
	// either is refused (-32000).
	MaxSubscriptionsPerSession = 100
	MaxSubscriptions           = 1000
	// MaxUpdatesPerSecond bounds the notifications/resources/updated
	// relayed from one upstream in a second; later ones are coalesced,
	// one per resource, and relayed the next second.
	MaxUpdatesPerSecond = 20
)

// subscriptions are the resource subscriptions of the clients of a
// republisher, forwarded to the upstreams serving the resources: one
// upstream subscription per resource, whatever the number of client
// sessions subscribed to it, kept while a live session is.
type subscriptions struct {
	mu        sync.Mutex
	bySession map[*sdk.ServerSession]map[string]bool // client session -> URIs
	upstream  map[string]*Client                     // URI -> the upstream subscribed to
	relays    map[*Client]*updateRelay
}

// updateRelay paces the updates relayed from one upstream
// (MaxUpdatesPerSecond).
type updateRelay struct {
	window  time.Time
	n       int
	pending map[string]bool
	timer   *time.Timer
}

// watchUpdates has the upstreams' notifications/resources/updated relayed
// to the client sessions subscribed (through the SDK, which knows them).
func (p *republisher) watchUpdates() {
	for _, c := range p.ups {
		c.onResourceUpdated(func(uri string) { p.updated(c, uri) })
	}
}

// updated relays c's notice that uri changed, if uri is subscribed to
// through c, within MaxUpdatesPerSecond.
func (p *republisher) updated(c *Client, uri string) {
	s := &p.subs
	s.mu.Lock()
	if s.upstream[uri] != c {
		s.mu.Unlock()
		return // not asked for (or asked of another upstream): dropped
	}
	r := s.relays[c]
	if r == nil {
		r = &updateRelay{pending: map[string]bool{}}
		if s.relays == nil {
			s.relays = map[*Client]*updateRelay{}
		}
		s.relays[c] = r
	}
	now := time.Now()
	if now.Sub(r.window) >= time.Second {
		r.window, r.n = now, 0
	}
	if r.n < MaxUpdatesPerSecond {
		r.n++
		s.mu.Unlock()
		p.srv.ResourceUpdated(context.Background(), &sdk.ResourceUpdatedNotificationParams{URI: uri})
		return
	}
	r.pending[uri] = true
	if r.timer == nil {
		r.timer = time.AfterFunc(r.window.Add(time.Second).Sub(now), func() { p.flush(c) })
	}
	s.mu.Unlock()
}

// flush relays the updates of c held back in the last second, one per
// resource still subscribed to.
func (p *republisher) flush(c *Client) {
	s := &p.subs
	s.mu.Lock()
	r := s.relays[c]
	var uris []string
	for uri := range r.pending {
		if s.upstream[uri] == c {
			uris = append(uris, uri)
		}
	}
	r.pending, r.timer, r.window, r.n = map[string]bool{}, nil, time.Now(), len(uris)
	s.mu.Unlock()
	for _, uri := range uris {
		p.srv.ResourceUpdated(context.Background(), &sdk.ResourceUpdatedNotificationParams{URI: uri})
	}
}

// subscribe serves resources/subscribe: uri must be a resource served,
// by an upstream that offers subscriptions; the first session to
// subscribe to it has agrun subscribe upstream.
func (p *republisher) subscribe(ctx context.Context, req *sdk.SubscribeRequest) error {
	uri := req.Params.URI
	c := p.ownerOf(uri, false)
	if c == nil {
		return sdk.ResourceNotFoundError(uri)
	}
	if caps := c.currentCaps(); caps.Resources == nil || !caps.Resources.Subscribe {
		return &jsonrpc.Error{Code: codeServerError, Message: "resources/subscribe: the server serving this resource offers no subscriptions"}
	}
	s := &p.subs
	s.mu.Lock()
	defer s.mu.Unlock()
	p.drop(ctx, p.prune())
	mine := s.bySession[req.Session]
	if mine[uri] {
		return nil
	}
	if len(mine) >= MaxSubscriptionsPerSession {
		return &jsonrpc.Error{Code: codeServerError, Message: "resources/subscribe: too many subscriptions in this session (at most 100)"}
	}
	if s.upstream[uri] == nil {
		if len(s.upstream) >= MaxSubscriptions {
			return &jsonrpc.Error{Code: codeServerError, Message: "resources/subscribe: too many subscriptions (the server keeps at most 1000)"}
		}
		if err := c.subscribe(ctx, uri); err != nil {
			return upstreamError(err)
		}
		if s.upstream == nil {
			s.upstream = map[string]*Client{}
		}
		s.upstream[uri] = c
	}
	if mine == nil {
		mine = map[string]bool{}
		if s.bySession == nil {
			s.bySession = map[*sdk.ServerSession]map[string]bool{}
		}
		s.bySession[req.Session] = mine
	}
	mine[uri] = true
	return nil
}

// unsubscribe serves resources/unsubscribe (of a URI not subscribed to:
// nothing happens); the last session to unsubscribe from a resource has
// agrun unsubscribe upstream.
func (p *republisher) unsubscribe(ctx context.Context, req *sdk.UnsubscribeRequest) error {
	s := &p.subs
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bySession[req.Session], req.Params.URI)
	p.drop(ctx, p.prune())
	return nil
}

// upstreamSub is one resource subscribed to upstream.
type upstreamSub struct {
	c   *Client
	uri string
}

// unsubscribeTimeout bounds one upstream unsubscription, which runs apart
// from the request that caused it.
const unsubscribeTimeout = 10 * time.Second

// drop unsubscribes upstream from subs, apart from ctx's cancellation
// (its request may be ending: under the 2026-07-28 protocol an
// unsubscription is the end of the client's subscriptions/listen request,
// whose context is cancelled by then), each within unsubscribeTimeout;
// an upstream's failure is logged. Called with s.mu held, as subscribe's
// upstream call is, so that an unsubscription and a new subscription of
// one resource reach the upstream in the order they were decided.
func (p *republisher) drop(ctx context.Context, subs []upstreamSub) {
	ctx = context.WithoutCancel(ctx)
	for _, d := range subs {
		uctx, cancel := context.WithTimeout(ctx, unsubscribeTimeout)
		err := d.c.unsubscribe(uctx, d.uri)
		cancel()
		if err != nil {
			p.log.Warn("mcp serve: upstream resource not unsubscribed", "server", d.c.Name(), "error", err.Error())
		}
	}
}

// prune forgets the subscriptions of sessions that ended, and the
// upstream subscriptions of the resources no live session is subscribed
// to any more, which it returns for drop. Called with s.mu held.
func (p *republisher) prune() []upstreamSub {
	s := &p.subs
	live := map[*sdk.ServerSession]bool{}
	for ss := range p.srv.Sessions() {
		live[ss] = true
	}
	held := map[string]bool{}
	for ss, uris := range s.bySession {
		if !live[ss] || len(uris) == 0 {
			delete(s.bySession, ss)
			continue
		}
		for uri := range uris {
			held[uri] = true
		}
	}
	var drop []upstreamSub
	for uri, c := range s.upstream {
		if held[uri] {
			continue
		}
		delete(s.upstream, uri)
		drop = append(drop, upstreamSub{c, uri})
	}
	return drop
}
