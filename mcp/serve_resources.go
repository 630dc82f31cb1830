package mcp

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// resyncEvery bounds how often the served resources and prompts are
// listed again from the upstream servers: a client that lists in a loop
// costs the upstreams one listing each per interval.
const resyncEvery = 5 * time.Second

// syncedMethods are the methods before which a republisher syncs.
var syncedMethods = map[string]bool{"resources/list": true, "resources/read": true, "resources/templates/list": true,
	"resources/subscribe": true, "resources/unsubscribe": true, "subscriptions/listen": true, "prompts/list": true, "prompts/get": true, "completion/complete": true}

// republisher keeps an sdk.Server's resources, resource templates and
// prompts in step with those of upstream MCP servers
// (ServerOptions.Upstreams), as agrun's Client sees them: cleaned, bounded
// (Client.Resources, ResourceTemplates, Prompts; reads and gets through
// readContents and getPromptForward). A resource keeps its URI and a
// template its URI template, served by the first upstream (in order)
// listing it; a prompt keeps its name, served by the first upstream
// listing it, and a later upstream's prompt of that name is served as
// SERVER__NAME. It forwards completions (complete) and subscriptions
// (subscribe, unsubscribe; subs.go) to the upstream serving what they
// name.
type republisher struct {
	ups []*Client
	srv *sdk.Server
	log interface {
		Warn(msg string, args ...any)
	}

	mu        sync.Mutex
	last      time.Time
	resources map[string]Resource         // URI -> as served
	owners    map[string]*Client          // URI -> the upstream serving it
	templates map[string]ResourceTemplate // URI template -> as served
	tOwners   map[string]*Client          // URI template -> the upstream serving it
	// prompts are the prompts served, by served name: replaced whole by
	// each sync (never changed once stored), so served reads it without
	// waiting for a sync's listings.
	prompts atomic.Pointer[map[string]servedPrompt]

	subs subscriptions
}

// servedPrompt is one upstream prompt as served.
type servedPrompt struct {
	c  *Client
	p  Prompt
	fp string // what a change of it changes
}

// served reports whether name is a prompt served now.
func (p *republisher) served(name string) bool {
	_, ok := p.prompt(name)
	return ok
}

// prompt is the prompt served as name.
func (p *republisher) prompt(name string) (servedPrompt, bool) {
	m := p.prompts.Load()
	if m == nil {
		return servedPrompt{}, false
	}
	sp, ok := (*m)[name]
	return sp, ok
}

// ownerOf is the upstream serving the resource uri (a listed resource) or,
// with templates, the URI template uri.
func (p *republisher) ownerOf(uri string, templates bool) *Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.owners[uri]; c != nil {
		return c
	}
	if templates {
		return p.tOwners[uri]
	}
	return nil
}

// sync lists the upstreams again unless that was done within resyncEvery.
// An upstream that fails keeps what it served before (logged).
func (p *republisher) sync(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < resyncEvery {
		return
	}
	p.last = time.Now()
	resources := map[string]Resource{}
	owner := map[string]*Client{}
	templates := map[string]ResourceTemplate{}
	tOwner := map[string]*Client{}
	prompts := map[string]servedPrompt{}
	var old map[string]servedPrompt
	if m := p.prompts.Load(); m != nil {
		old = *m
	}
	for _, c := range p.ups {
		rs, err := c.Resources(ctx)
		if err != nil {
			p.log.Warn("mcp serve: upstream resources not listed", "server", c.Name(), "error", err.Error())
			for uri, r := range p.resources {
				if _, taken := resources[uri]; !taken && p.owners[uri] == c {
					resources[uri], owner[uri] = r, c
				}
			}
		}
		for _, r := range rs {
			if _, taken := resources[r.URI]; !taken {
				resources[r.URI], owner[r.URI] = r, c
			}
		}
		ts, err := c.ResourceTemplates(ctx)
		if err != nil {
			p.log.Warn("mcp serve: upstream resource templates not listed", "server", c.Name(), "error", err.Error())
			for ut, r := range p.templates {
				if _, taken := templates[ut]; !taken && p.tOwners[ut] == c {
					templates[ut], tOwner[ut] = r, c
				}
			}
		}
		for _, r := range ts {
			if _, taken := templates[r.URITemplate]; !taken {
				templates[r.URITemplate], tOwner[r.URITemplate] = r, c
			}
		}
		ps, err := c.Prompts(ctx)
		if err != nil {
			p.log.Warn("mcp serve: upstream prompts not listed", "server", c.Name(), "error", err.Error())
			for name, sp := range old { // it keeps what it served
				if _, taken := prompts[name]; !taken && sp.c == c {
					prompts[name] = sp
				}
			}
			continue
		}
		for _, q := range ps {
			name := q.Name
			if _, taken := prompts[name]; taken {
				// An earlier upstream serves this name: this one's is
				// SERVER__NAME, so that both stay reachable.
				if name = registry.PrefixedName(c.Name(), q.Name); prompts[name].c != nil {
					continue
				}
			}
			prompts[name] = servedPrompt{c, q, fmt.Sprintf("%s\x00%s\x00%s\x00%v", q.Name, q.Title, q.Description, q.Arguments)}
		}
	}
	var gone []string
	for uri := range p.resources {
		if _, ok := resources[uri]; !ok {
			gone = append(gone, uri)
		}
	}
	if len(gone) > 0 {
		p.srv.RemoveResources(gone...)
	}
	for uri, r := range resources {
		if old, ok := p.resources[uri]; ok && old == r && p.owners[uri] == owner[uri] {
			continue
		}
		p.srv.AddResource(&sdk.Resource{URI: r.URI, Name: orDefaultText(r.Name, r.URI), Title: r.Title, Description: r.Description, MIMEType: r.MIMEType, Size: r.Size}, p.read(owner[uri]))
	}
	p.resources, p.owners = resources, owner
	gone = gone[:0]
	for ut := range p.templates {
		if _, ok := templates[ut]; !ok {
			gone = append(gone, ut)
		}
	}
	if len(gone) > 0 {
		p.srv.RemoveResourceTemplates(gone...)
	}
	for ut, r := range templates {
		if old, ok := p.templates[ut]; ok && old == r && p.tOwners[ut] == tOwner[ut] {
			continue
		}
		if err := p.addTemplate(r, tOwner[ut]); err != nil {
			p.log.Warn("mcp serve: upstream resource template not served", "server", tOwner[ut].Name(), "error", err.Error())
			delete(templates, ut)
			delete(tOwner, ut)
		}
	}
	p.templates, p.tOwners = templates, tOwner
	var goneP []string
	for name := range old {
		if _, ok := prompts[name]; !ok {
			goneP = append(goneP, name)
		}
	}
	if len(goneP) > 0 {
		p.srv.RemovePrompts(goneP...)
	}
	for name, s := range prompts {
		if o, ok := old[name]; ok && o.c == s.c && o.fp == s.fp {
			continue
		}
		sp := &sdk.Prompt{Name: name, Title: s.p.Title, Description: s.p.Description}
		for _, a := range s.p.Arguments {
			sp.Arguments = append(sp.Arguments, &sdk.PromptArgument{Name: a.Name, Description: a.Description, Required: a.Required})
		}
		p.srv.AddPrompt(sp, p.get(s.c, s.p.Name))
	}
	p.prompts.Store(&prompts)
}

// addTemplate serves the template r of c; the SDK panics on a template it
// cannot parse, and r comes from an untrusted server.
func (p *republisher) addTemplate(r ResourceTemplate, c *Client) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	p.srv.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: r.URITemplate, Name: orDefaultText(r.Name, r.URITemplate), Title: r.Title, Description: r.Description, MIMEType: r.MIMEType}, p.read(c))
	return nil
}

func orDefaultText(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// read serves resources/read from c, of a resource or of a URI matching
// a template c lists: the contents as readContents re-serves them (text
// cleaned and cut, binary data within MaxResourceBlobBytes).
func (p *republisher) read(c *Client) sdk.ResourceHandler {
	return func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		contents, err := c.readContents(ctx, req.Params.URI)
		if err != nil {
			return nil, upstreamError(err)
		}
		return &sdk.ReadResourceResult{Contents: contents}, nil
	}
}

// get serves prompts/get of the upstream prompt name from c, as
// getPromptForward re-serves it.
func (p *republisher) get(c *Client, name string) sdk.PromptHandler {
	return func(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		res, err := c.getPromptForward(ctx, name, req.Params.Arguments)
		if err != nil {
			return nil, upstreamError(err)
		}
		return res, nil
	}
}

// complete serves completion/complete for a prompt or resource template
// (or resource) served, through the upstream serving it; anything else is
// -32602.
func (p *republisher) complete(ctx context.Context, req *sdk.CompleteRequest) (*sdk.CompleteResult, error) {
	ref := req.Params.Ref
	fwd := &sdk.CompleteParams{Argument: req.Params.Argument}
	if cx := req.Params.Context; cx != nil {
		fwd.Context = &sdk.CompleteContext{Arguments: maps.Clone(cx.Arguments)}
	}
	var c *Client
	switch ref.Type {
	case "ref/prompt":
		if sp, ok := p.prompt(ref.Name); ok {
			c, fwd.Ref = sp.c, &sdk.CompleteReference{Type: ref.Type, Name: sp.p.Name}
		}
	case "ref/resource":
		if c = p.ownerOf(ref.URI, true); c != nil {
			fwd.Ref = &sdk.CompleteReference{Type: ref.Type, URI: ref.URI}
		}
	}
	if c == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion/complete: no prompt or resource template of that name is served"}
	}
	res, err := c.complete(ctx, fwd)
	if err != nil {
		return nil, upstreamError(err)
	}
	return res, nil
}

// upstreamError is an upstream's failure as the JSON-RPC error served:
// its text cleaned and cut.
func upstreamError(err error) error {
	return &jsonrpc.Error{Code: codeServerError, Message: SanitizeText(err.Error(), MaxErrorTextBytes)}
}
