package mcp

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
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
//
// mu guards the maps only and is never held across a call to an
// upstream: one upstream that stops answering must not hold up the
// subscriptions to the others, nor the updates relayed from them. The
// upstream calls for one resource keep the order in which they were
// decided through a queue per resource (tail).
//
// A session holds a resource or not, as the go-sdk's own record of
// subscriptions does (one entry per session and resource, which its
// unsubscribe deletes): under 2026-07-28, a subscriptions/listen of a
// resource started while the same session's previous listen of it is
// still ending can lose the subscription in the SDK, and does here too,
// so that agrun never keeps an upstream subscription whose updates the
// SDK would deliver to nobody.
type subscriptions struct {
	mu        sync.Mutex
	bySession map[*sdk.ServerSession]map[string]bool // client session -> URIs
	asking    map[*sdk.ServerSession]int             // client session -> its subscriptions waiting for the upstream
	upstream  map[string]*upstreamSub                // URI -> its upstream subscription
	tail      map[string]chan struct{}               // URI -> closed when its last queued upstream call is done
	watched   map[*sdk.ServerSession]bool            // client sessions whose end is watched (watchEnd)
	relays    map[*Client]*updateRelay
}

// upstreamSub is one resource subscribed to upstream, or being
// subscribed to (pending until the upstream answered).
type upstreamSub struct {
	c       *Client
	uri     string
	pending bool
	ready   chan struct{} // closed when the upstream answered
	err     error         // its refusal, set before ready is closed
	gaveUp  bool          // err is the end of the asking request's context: the others waiting ask again
}

// enqueue queues an upstream call for uri after those already queued,
// and returns what to wait for before making it and what to call when it
// is done. Called with s.mu held.
func (s *subscriptions) enqueue(uri string) (prev <-chan struct{}, done func()) {
	if s.tail == nil {
		s.tail = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	prev = s.tail[uri]
	s.tail[uri] = ch
	return prev, func() {
		s.mu.Lock()
		if s.tail[uri] == ch {
			delete(s.tail, uri)
		}
		s.mu.Unlock()
		close(ch)
	}
}

// wait waits for prev (nil: nothing queued before) or ctx's end; it
// reports whether prev is done. When ctx ends first, done is called
// later, once prev is, so that the queue behind keeps its order.
func wait(ctx context.Context, prev <-chan struct{}, done func()) bool {
	if prev == nil {
		return true
	}
	select {
	case <-prev:
		return true
	case <-ctx.Done():
		go func() { <-prev; done() }()
		return false
	}
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
	if e := s.upstream[uri]; e == nil || e.c != c {
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
		if e := s.upstream[uri]; e != nil && e.c == c {
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
// subscribe to it has agrun subscribe upstream, and the sessions that ask
// meanwhile wait for that answer.
func (p *republisher) subscribe(ctx context.Context, req *sdk.SubscribeRequest) error {
	uri := req.Params.URI
	c := p.ownerOf(uri, false)
	if c == nil {
		return sdk.ResourceNotFoundError(uri)
	}
	if caps := c.currentCaps(); caps.Resources == nil || !caps.Resources.Subscribe {
		return &jsonrpc.Error{Code: codeServerError, Message: "resources/subscribe: the server serving this resource offers no subscriptions"}
	}
	for {
		// Asked again when the request this one waited for gave up (its
		// own end is no answer for this one).
		if again, err := p.subscribeOnce(ctx, req, c, uri); !again {
			return err
		}
	}
}

// subscribeOnce is one attempt of subscribe; again: the request whose
// upstream answer this one waited for gave up, ask again.
func (p *republisher) subscribeOnce(ctx context.Context, req *sdk.SubscribeRequest, c *Client, uri string) (again bool, _ error) {
	s := &p.subs
	s.mu.Lock()
	drops := p.prune()
	// Other sessions' leftovers are unsubscribed apart from this request.
	defer func() { go p.drop(ctx, drops) }()
	mine := s.bySession[req.Session]
	if mine[uri] {
		s.mu.Unlock()
		return false, nil
	}
	// Those still waiting for the upstream count too: a session's
	// concurrent requests cannot pass the cap together.
	if len(mine)+s.asking[req.Session] >= MaxSubscriptionsPerSession {
		s.mu.Unlock()
		return false, &jsonrpc.Error{Code: codeServerError, Message: "resources/subscribe: too many subscriptions in this session (at most 100)"}
	}
	e := s.upstream[uri]
	if e == nil && len(s.upstream) >= MaxSubscriptions {
		s.mu.Unlock()
		return false, &jsonrpc.Error{Code: codeServerError, Message: "resources/subscribe: too many subscriptions (the server keeps at most 1000)"}
	}
	if s.asking == nil {
		s.asking = map[*sdk.ServerSession]int{}
	}
	s.asking[req.Session]++
	answered := func() { // with s.mu held
		if s.asking[req.Session]--; s.asking[req.Session] <= 0 {
			delete(s.asking, req.Session)
		}
	}
	creator := e == nil
	if creator {
		e = &upstreamSub{c: c, uri: uri, pending: true, ready: make(chan struct{})}
		if s.upstream == nil {
			s.upstream = map[string]*upstreamSub{}
		}
		s.upstream[uri] = e
		prev, done := s.enqueue(uri)
		s.mu.Unlock()
		var err error
		called := false
		if !wait(ctx, prev, done) {
			err = ctx.Err() // never asked upstream
		} else if err = ctx.Err(); err == nil {
			called = true
			err = c.subscribe(ctx, uri)
			done()
		} else {
			done()
		}
		s.mu.Lock()
		e.pending, e.err = false, err
		if err != nil {
			e.gaveUp = ctx.Err() != nil
			if s.upstream[uri] == e {
				delete(s.upstream, uri)
			}
			// Not answered in time (this request ended, or the upstream's
			// deadline passed): the upstream may still take it, so it is
			// unsubscribed, in the resource's queue.
			if called && (ctx.Err() != nil || registry.KindOf(err) == registry.MCPTimeout) {
				prev, done := s.enqueue(uri)
				drops = append(drops, queuedDrop{e, prev, done})
			}
		}
		close(e.ready)
	} else {
		s.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			s.mu.Lock()
			answered()
			s.mu.Unlock()
			return false, upstreamError(ctx.Err())
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	answered()
	if e.err != nil {
		if !creator && e.gaveUp && ctx.Err() == nil {
			return true, nil
		}
		return false, upstreamError(e.err)
	}
	if s.upstream[uri] != e {
		// Unsubscribed upstream while this request waited (every session
		// holding it left): the client asks again.
		return false, &jsonrpc.Error{Code: codeServerError, Message: "resources/subscribe: the resource was unsubscribed meanwhile; subscribe again"}
	}
	mine = s.bySession[req.Session]
	if mine == nil {
		mine = map[string]bool{}
		if s.bySession == nil {
			s.bySession = map[*sdk.ServerSession]map[string]bool{}
		}
		s.bySession[req.Session] = mine
	}
	mine[uri] = true
	p.watchEnd(req.Session)
	return false, nil
}

// watchEnd has the subscriptions of ss forgotten, and those upstream no
// live session holds any more dropped, as soon as ss ends (not at some
// other session's next request). Called with s.mu held.
func (p *republisher) watchEnd(ss *sdk.ServerSession) {
	s := &p.subs
	if s.watched[ss] {
		return
	}
	if s.watched == nil {
		s.watched = map[*sdk.ServerSession]bool{}
	}
	s.watched[ss] = true
	go func() {
		ss.Wait()
		s.mu.Lock()
		delete(s.watched, ss)
		delete(s.bySession, ss) // it may still be listed as live for a moment
		drops := p.prune()
		s.mu.Unlock()
		p.drop(context.Background(), drops)
	}()
}

// unsubscribe serves resources/unsubscribe (of a URI not subscribed to:
// nothing happens); the last session to unsubscribe from a resource has
// agrun unsubscribe upstream before the answer.
func (p *republisher) unsubscribe(ctx context.Context, req *sdk.UnsubscribeRequest) error {
	s := &p.subs
	s.mu.Lock()
	delete(s.bySession[req.Session], req.Params.URI)
	drops := p.prune()
	s.mu.Unlock()
	p.drop(ctx, drops)
	return nil
}

// queuedDrop is an upstream unsubscription decided (and queued) by prune.
type queuedDrop struct {
	*upstreamSub
	prev <-chan struct{}
	done func()
}

// unsubscribeTimeout bounds the upstream unsubscriptions one drop asks
// of one upstream, all together; they run apart from the request that
// caused them.
const unsubscribeTimeout = 10 * time.Second

// drop unsubscribes upstream from subs, each in its resource's queue,
// apart from ctx's cancellation (its request may be ending: under the
// 2026-07-28 protocol an unsubscription is the end of the client's
// subscriptions/listen request, whose context is cancelled by then). The
// upstreams are asked side by side, each within unsubscribeTimeout for
// all its resources; past an upstream's first failure, or its deadline,
// the rest of its resources are abandoned (left subscribed upstream,
// their updates dropped here) rather than waited for one by one, and
// logged once.
func (p *republisher) drop(ctx context.Context, subs []queuedDrop) {
	byUp := map[*Client][]queuedDrop{}
	for _, d := range subs {
		byUp[d.c] = append(byUp[d.c], d)
	}
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for c, subs := range byUp {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, unsubscribeTimeout)
			defer cancel()
			var failed error
			abandoned := 0
			for _, d := range subs {
				if failed != nil {
					// Not called, but done in order, once prev is.
					abandoned++
					go func() {
						if d.prev != nil {
							<-d.prev
						}
						d.done()
					}()
					continue
				}
				if !wait(ctx, d.prev, d.done) {
					failed = ctx.Err()
					abandoned++
					continue
				}
				err := c.unsubscribe(ctx, d.uri)
				d.done()
				if err != nil {
					failed = err
					abandoned++
				}
			}
			if failed != nil {
				p.log.Warn("mcp serve: upstream resources not unsubscribed", "server", c.Name(), "count", abandoned, "of", len(subs), "error", failed.Error())
			}
		})
	}
	wg.Wait()
}

// prune forgets the subscriptions of sessions that ended, and the
// upstream subscriptions of the resources no live session is subscribed
// to any more (not those still pending), and queues their upstream
// unsubscriptions, which it returns for drop. Called with s.mu held.
func (p *republisher) prune() []queuedDrop {
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
	var drop []queuedDrop
	for uri, e := range s.upstream {
		if held[uri] || e.pending {
			continue
		}
		delete(s.upstream, uri)
		prev, done := s.enqueue(uri)
		drop = append(drop, queuedDrop{e, prev, done})
	}
	return drop
}
