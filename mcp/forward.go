package mcp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// Bounds of what `agrun mcp serve` forwards from an upstream server it
// re-serves (ServerOptions.Upstreams), beyond those of Resources and
// Prompts.
const (
	// MaxResourceBlobBytes bounds the binary data (blobs, images, audio)
	// of one re-served resources/read or prompts/get, decoded: more is
	// an mcp_error, never cut bytes (cut binary data is corrupt data).
	MaxResourceBlobBytes = 4 << 20
	// MaxCompletionValues bounds the values of one re-served completion
	// (MCP's own limit); more are cut and hasMore is set.
	MaxCompletionValues = 100
	// MaxResourceTemplates bounds an upstream's resource templates
	// (every page); a longer listing is an mcp_error.
	MaxResourceTemplates = 1000
)

// Smaller bounds of forwarded items.
const (
	maxCompletionValueBytes = 1024 // one completion value, cleaned
	maxForwardedItems       = 1000 // contents of one read, messages of one prompt
	maxURIBytes             = 2048 // a URI or URI template taken from a server
)

// ResourceTemplate is one resource template a server lists: every string
// cleaned (SanitizeText) but URITemplate, which must be matched as it is —
// a template with an unsafe character is left out of the listing.
type ResourceTemplate struct {
	URITemplate, Name, Title, Description, MIMEType string
}

// safeURI reports whether u, a URI (or URI template) from a server, may be
// served and sent back as it is.
func safeURI(u string) bool { return u != "" && len(u) <= maxURIBytes && textsafe.IsSafe(u) }

// ResourceTemplates lists the server's resource templates (every page, at
// most MaxResourceTemplates), sorted by template; a server without the
// resources capability has none. Errors are *registry.Error as for
// CallTool.
func (c *Client) ResourceTemplates(ctx context.Context) ([]ResourceTemplate, error) {
	var out []ResourceTemplate
	err := c.request(ctx, "", "resources/templates/list", func(ctx context.Context, s *session) error {
		if s.capabilities().Resources == nil {
			return nil
		}
		return pages(MaxResourceTemplates, "resource templates", func(cursor string) (int, string, error) {
			res, err := s.cs.ListResourceTemplates(ctx, &sdk.ListResourceTemplatesParams{Cursor: cursor})
			if err != nil {
				return 0, "", err
			}
			for _, r := range res.ResourceTemplates {
				if r == nil || !safeURI(r.URITemplate) {
					continue
				}
				out = append(out, ResourceTemplate{URITemplate: r.URITemplate, Name: SanitizeText(r.Name, 200), Title: SanitizeText(r.Title, maxTitleBytes),
					Description: SanitizeText(r.Description, MaxDescriptionBytes), MIMEType: SanitizeText(r.MIMEType, 100)})
			}
			return len(out), res.NextCursor, nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b ResourceTemplate) int { return strings.Compare(a.URITemplate, b.URITemplate) })
	return out, nil
}

// currentCaps are the capabilities the server declared in the current
// session, or none when there is none (it does not reconnect).
func (c *Client) currentCaps() *sdk.ServerCapabilities {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s == nil {
		return &sdk.ServerCapabilities{}
	}
	return s.capabilities()
}

// forwardBudget is what is left of one forwarded answer's bounds: text
// (cleaned) and binary data.
type forwardBudget struct{ text, blob int }

func newForwardBudget() *forwardBudget {
	return &forwardBudget{text: MaxResourceTextBytes, blob: MaxResourceBlobBytes}
}

// cleanText is s cleaned and cut to what is left of the text budget.
func (b *forwardBudget) cleanText(s string) string {
	if b.text <= 0 {
		return ""
	}
	s = SanitizeText(s, b.text)
	b.text -= len(s)
	return s
}

// takeBlob spends n bytes of binary data, or reports that they are over
// the cap.
func (b *forwardBudget) takeBlob(what string, n int) error {
	if n > b.blob {
		return fmt.Errorf("%s: more than %d bytes of binary data, which agrun does not re-serve", what, MaxResourceBlobBytes)
	}
	b.blob -= n
	return nil
}

// contents is one resource contents item as re-served: text cleaned,
// blob bytes as they are (within the budget), MIME type cleaned; a URI
// that is missing or unsafe becomes uri, the one asked for.
func (b *forwardBudget) contents(uri string, rc *sdk.ResourceContents) (*sdk.ResourceContents, error) {
	u := rc.URI
	if !safeURI(u) {
		u = uri
	}
	out := &sdk.ResourceContents{URI: u, MIMEType: SanitizeText(rc.MIMEType, 100)}
	if rc.Blob != nil {
		if err := b.takeBlob("resource "+SanitizeText(u, 200), len(rc.Blob)); err != nil {
			return nil, err
		}
		out.Blob = rc.Blob
		return out, nil
	}
	out.Text = b.cleanText(rc.Text)
	return out, nil
}

// content is one content block (of a prompt message) as re-served: text
// cleaned, images and audio with their bytes (within the budget), an
// embedded resource as contents does it, a resource link with a safe URI
// and cleaned names; anything else, or a link or embedded resource whose
// URI is unsafe, becomes a text placeholder.
func (b *forwardBudget) content(c sdk.Content) (sdk.Content, error) {
	switch c := c.(type) {
	case *sdk.TextContent:
		return &sdk.TextContent{Text: b.cleanText(c.Text)}, nil
	case *sdk.ImageContent:
		if err := b.takeBlob("image", len(c.Data)); err != nil {
			return nil, err
		}
		return &sdk.ImageContent{Data: c.Data, MIMEType: SanitizeText(c.MIMEType, 100)}, nil
	case *sdk.AudioContent:
		if err := b.takeBlob("audio", len(c.Data)); err != nil {
			return nil, err
		}
		return &sdk.AudioContent{Data: c.Data, MIMEType: SanitizeText(c.MIMEType, 100)}, nil
	case *sdk.EmbeddedResource:
		if c.Resource == nil || !safeURI(c.Resource.URI) {
			return &sdk.TextContent{Text: "[resource]"}, nil
		}
		rc, err := b.contents(c.Resource.URI, c.Resource)
		if err != nil {
			return nil, err
		}
		return &sdk.EmbeddedResource{Resource: rc}, nil
	case *sdk.ResourceLink:
		if !safeURI(c.URI) {
			return &sdk.TextContent{Text: "[resource link]"}, nil
		}
		return &sdk.ResourceLink{URI: c.URI, Name: SanitizeText(c.Name, 200), Title: SanitizeText(c.Title, maxTitleBytes),
			Description: SanitizeText(c.Description, MaxDescriptionBytes), MIMEType: SanitizeText(c.MIMEType, 100)}, nil
	case nil:
		return &sdk.TextContent{Text: ""}, nil
	default:
		return &sdk.TextContent{Text: b.cleanText(contentText([]sdk.Content{c}))}, nil
	}
}

// forwardError is err, from cleaning what the server sent, as the
// *registry.Error a request's failure is.
func (c *Client) forwardError(what string, err error) error {
	return c.errorf(registry.MCPError, "", "%s: %w", what, err)
}

// readContents reads the resource at uri for re-serving: its contents
// (at most 1,000) as forwardBudget.contents keeps them, text
// MaxResourceTextBytes in all, binary data MaxResourceBlobBytes in all
// (more is an mcp_error). Errors are *registry.Error as for CallTool.
func (c *Client) readContents(ctx context.Context, uri string) ([]*sdk.ResourceContents, error) {
	what := "resources/read " + SanitizeText(uri, 200)
	var res *sdk.ReadResourceResult
	err := c.request(ctx, "", what, func(ctx context.Context, s *session) (err error) {
		res, err = s.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
		return err
	})
	if err != nil {
		return nil, err
	}
	b := newForwardBudget()
	out := []*sdk.ResourceContents{}
	for _, rc := range res.Contents {
		if rc == nil || len(out) == maxForwardedItems {
			continue
		}
		cc, err := b.contents(uri, rc)
		if err != nil {
			return nil, c.forwardError(what, err)
		}
		out = append(out, cc)
	}
	return out, nil
}

// getPromptForward gets the prompt called name with args for re-serving:
// its description and messages (at most 1,000), each message's content as
// forwardBudget.content keeps it (text MaxResourceTextBytes in all, binary
// data MaxResourceBlobBytes in all: more is an mcp_error). Errors are
// *registry.Error as for CallTool.
func (c *Client) getPromptForward(ctx context.Context, name string, args map[string]string) (*sdk.GetPromptResult, error) {
	what := "prompts/get " + SanitizeText(name, 200)
	var res *sdk.GetPromptResult
	err := c.request(ctx, "", what, func(ctx context.Context, s *session) (err error) {
		res, err = s.cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: name, Arguments: maps.Clone(args)})
		return err
	})
	if err != nil {
		return nil, err
	}
	b := newForwardBudget()
	out := &sdk.GetPromptResult{Description: SanitizeText(res.Description, MaxDescriptionBytes), Messages: []*sdk.PromptMessage{}}
	for _, m := range res.Messages {
		if m == nil || len(out.Messages) == maxForwardedItems {
			continue
		}
		role := sdk.Role("user")
		if m.Role == "assistant" {
			role = "assistant"
		}
		content, err := b.content(m.Content)
		if err != nil {
			return nil, c.forwardError(what, err)
		}
		out.Messages = append(out.Messages, &sdk.PromptMessage{Role: role, Content: content})
	}
	return out, nil
}

// complete forwards a completion/complete request whose ref names the
// server's own prompt or resource (template): at most
// MaxCompletionValues values (hasMore set when more were cut), each
// cleaned and cut to 1 KiB, empty ones left out. A server without the
// completions capability completes nothing (no values). Errors are
// *registry.Error as for CallTool.
func (c *Client) complete(ctx context.Context, p *sdk.CompleteParams) (*sdk.CompleteResult, error) {
	var res *sdk.CompleteResult
	err := c.request(ctx, "", "completion/complete", func(ctx context.Context, s *session) (err error) {
		if s.capabilities().Completions == nil {
			return nil
		}
		res, err = s.cs.Complete(ctx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &sdk.CompleteResult{Completion: sdk.CompletionResultDetails{Values: []string{}}}
	if res == nil {
		return out, nil
	}
	for _, v := range res.Completion.Values {
		if len(out.Completion.Values) == MaxCompletionValues {
			out.Completion.HasMore = true
			break
		}
		if v = SanitizeText(v, maxCompletionValueBytes); v != "" {
			out.Completion.Values = append(out.Completion.Values, v)
		}
	}
	out.Completion.HasMore = out.Completion.HasMore || res.Completion.HasMore
	if t := res.Completion.Total; t >= len(out.Completion.Values) {
		out.Completion.Total = t
	}
	return out, nil
}

// subscribe and unsubscribe forward resources/subscribe and
// resources/unsubscribe of uri. Errors are *registry.Error as for
// CallTool.
func (c *Client) subscribe(ctx context.Context, uri string) error {
	return c.request(ctx, "", "resources/subscribe "+SanitizeText(uri, 200), func(ctx context.Context, s *session) error {
		return s.cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri})
	})
}

func (c *Client) unsubscribe(ctx context.Context, uri string) error {
	return c.request(ctx, "", "resources/unsubscribe "+SanitizeText(uri, 200), func(ctx context.Context, s *session) error {
		return s.cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: uri})
	})
}

// onResourceUpdated sets what the Client does with the server's
// notifications/resources/updated: f gets the URI (nil: they are
// dropped). Safe for concurrent use.
func (c *Client) onResourceUpdated(f func(uri string)) {
	c.updated.Store(&f)
}
