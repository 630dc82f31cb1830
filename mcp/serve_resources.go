package mcp

import (
	"context"
	"fmt"
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
var syncedMethods = map[string]bool{"resources/list": true, "resources/read": true, "prompts/list": true, "prompts/get": true}

// republisher keeps an sdk.Server's resources and prompts in step with
// those of upstream MCP servers (ServerOptions.Upstreams), as agrun's
// Client sees them: cleaned, bounded (Client.Resources, ReadResource,
// Prompts, GetPrompt). A resource keeps its URI, served by the first
// upstream (in order) listing it; a prompt is served as SERVER__NAME.
type republisher struct {
	ups []*Client
	srv *sdk.Server
	log interface {
		Warn(msg string, args ...any)
	}

	mu        sync.Mutex
	last      time.Time
	resources map[string]Resource // URI -> as served
	owners    map[string]*Client  // URI -> the upstream serving it
	// prompts are the prompts served, by served name: replaced whole by
	// each sync (never changed once stored), so served reads it without
	// waiting for a sync's listings.
	prompts atomic.Pointer[map[string]servedPrompt]
}

// servedPrompt is one upstream prompt as served.
type servedPrompt struct {
	c  *Client
	p  Prompt
	fp string // what a change of it changes
}

// served reports whether name is a prompt served now.
func (p *republisher) served(name string) bool {
	m := p.prompts.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[name]
	return ok
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
			name := registry.PrefixedName(c.Name(), q.Name)
			if _, taken := prompts[name]; taken {
				continue
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
		p.srv.AddResource(&sdk.Resource{URI: r.URI, Name: orDefaultText(r.Name, r.URI), Title: r.Title, Description: r.Description, MIMEType: r.MIMEType, Size: r.Size}, p.read(owner[uri], r))
	}
	p.resources, p.owners = resources, owner
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

func orDefaultText(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// read serves resources/read of r from c: its text as Client.ReadResource
// gives it (cleaned, cut; a blob as a placeholder).
func (p *republisher) read(c *Client, r Resource) sdk.ResourceHandler {
	return func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		text, err := c.ReadResource(ctx, r.URI)
		if err != nil {
			return nil, &jsonrpc.Error{Code: codeServerError, Message: SanitizeText(err.Error(), MaxErrorTextBytes)}
		}
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: r.URI, MIMEType: r.MIMEType, Text: text}}}, nil
	}
}

// get serves prompts/get of the upstream prompt name from c.
func (p *republisher) get(c *Client, name string) sdk.PromptHandler {
	return func(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		msgs, err := c.GetPrompt(ctx, name, req.Params.Arguments)
		if err != nil {
			return nil, &jsonrpc.Error{Code: codeServerError, Message: SanitizeText(err.Error(), MaxErrorTextBytes)}
		}
		res := &sdk.GetPromptResult{}
		for _, m := range msgs {
			res.Messages = append(res.Messages, &sdk.PromptMessage{Role: sdk.Role(m.Role), Content: &sdk.TextContent{Text: m.Text}})
		}
		return res, nil
	}
}
