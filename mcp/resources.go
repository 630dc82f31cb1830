package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// Bounds of what a server's resources and prompts may bring.
const (
	// MaxResources and MaxPrompts bound a listing (every page); a longer
	// one is an mcp_error.
	MaxResources = 1000
	MaxPrompts   = 1000
	// MaxResourceTextBytes bounds the text of one resource read, or of
	// one prompt's messages, after cleaning; longer text is cut and ends
	// in "…".
	MaxResourceTextBytes = 1 << 20
)

// Resource is one resource a server lists: every string cleaned
// (SanitizeText) but URI, which must be sent back as it is — a URI with an
// unsafe character is left out of the listing.
type Resource struct {
	URI, Name, Title, Description, MIMEType string
	Size                                    int64
}

// Prompt is one prompt a server lists, cleaned.
type Prompt struct {
	Name, Title, Description string
	Arguments                []PromptArgument
}

// PromptArgument is one argument of a Prompt.
type PromptArgument struct {
	Name, Description string
	Required          bool
}

// PromptMessage is one message of a prompt as text: Role "user" or
// "assistant"; images and other media as placeholders.
type PromptMessage struct {
	Role, Text string
}

// capabilities are what the server declared in its initialize answer.
func (s *session) capabilities() *sdk.ServerCapabilities {
	if r := s.cs.InitializeResult(); r != nil && r.Capabilities != nil {
		return r.Capabilities
	}
	return &sdk.ServerCapabilities{}
}

// pages runs page (a listing's request for one cursor, which returns how
// many items are kept so far and the next cursor) until the server has no
// more, at most maxPages pages and max items: a server cannot page
// forever nor list without end.
func pages(max int, what string, page func(cursor string) (int, string, error)) error {
	cursor := ""
	for i := 0; ; i++ {
		if i == maxPages {
			return fmt.Errorf("more than %d pages", maxPages)
		}
		n, next, err := page(cursor)
		if err != nil {
			return err
		}
		if n > max {
			return fmt.Errorf("more than %d %s", max, what)
		}
		if next == "" || next == cursor {
			return nil
		}
		cursor = next
	}
}

// Resources lists the server's resources (every page, at most
// MaxResources), sorted by URI; a server without the resources capability
// has none. Errors are *registry.Error as for CallTool.
func (c *Client) Resources(ctx context.Context) ([]Resource, error) {
	var out []Resource
	err := c.request(ctx, "", "resources/list", func(ctx context.Context, s *session) error {
		if s.capabilities().Resources == nil {
			return nil
		}
		return pages(MaxResources, "resources", func(cursor string) (int, string, error) {
			res, err := s.cs.ListResources(ctx, &sdk.ListResourcesParams{Cursor: cursor})
			if err != nil {
				return 0, "", err
			}
			for _, r := range res.Resources {
				if r == nil || r.URI == "" || !textsafe.IsSafe(r.URI) || len(r.URI) > 2048 {
					continue
				}
				out = append(out, Resource{URI: r.URI, Name: SanitizeText(r.Name, 200), Title: SanitizeText(r.Title, maxTitleBytes),
					Description: SanitizeText(r.Description, MaxDescriptionBytes), MIMEType: SanitizeText(r.MIMEType, 100), Size: r.Size})
			}
			return len(out), res.NextCursor, nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Resource) int { return strings.Compare(a.URI, b.URI) })
	return out, nil
}

// ReadResource reads the resource at uri: the text of its contents joined
// with newlines (a blob as a placeholder with its type and size), cleaned
// and cut to MaxResourceTextBytes. Errors are *registry.Error as for
// CallTool.
func (c *Client) ReadResource(ctx context.Context, uri string) (string, error) {
	var text string
	err := c.request(ctx, "", "resources/read "+SanitizeText(uri, 200), func(ctx context.Context, s *session) error {
		res, err := s.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
		if err != nil {
			return err
		}
		parts := make([]string, 0, len(res.Contents))
		for _, rc := range res.Contents {
			switch {
			case rc == nil:
			case rc.Blob != nil:
				parts = append(parts, fmt.Sprintf("[resource %s: %s, %d bytes]", SanitizeText(rc.URI, 200), orUnknown(rc.MIMEType), len(rc.Blob)))
			default:
				parts = append(parts, rc.Text)
			}
		}
		text = SanitizeText(strings.Join(parts, "\n"), MaxResourceTextBytes)
		return nil
	})
	return text, err
}

// Prompts lists the server's prompts (every page, at most MaxPrompts),
// sorted by name; a server without the prompts capability has none.
func (c *Client) Prompts(ctx context.Context) ([]Prompt, error) {
	var out []Prompt
	err := c.request(ctx, "", "prompts/list", func(ctx context.Context, s *session) error {
		if s.capabilities().Prompts == nil {
			return nil
		}
		return pages(MaxPrompts, "prompts", func(cursor string) (int, string, error) {
			res, err := s.cs.ListPrompts(ctx, &sdk.ListPromptsParams{Cursor: cursor})
			if err != nil {
				return 0, "", err
			}
			for _, p := range res.Prompts {
				if p == nil || p.Name == "" || !textsafe.IsSafe(p.Name) || len(p.Name) > 256 {
					continue
				}
				q := Prompt{Name: p.Name, Title: SanitizeText(p.Title, maxTitleBytes), Description: SanitizeText(p.Description, MaxDescriptionBytes)}
				for _, a := range p.Arguments {
					if a != nil && len(q.Arguments) < 64 {
						q.Arguments = append(q.Arguments, PromptArgument{Name: SanitizeText(a.Name, 200), Description: SanitizeText(a.Description, MaxDescriptionBytes), Required: a.Required})
					}
				}
				out = append(out, q)
			}
			return len(out), res.NextCursor, nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Prompt) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// GetPrompt gets the prompt called name with args: its messages as text
// (contentText's rendering), cleaned, MaxResourceTextBytes in all.
func (c *Client) GetPrompt(ctx context.Context, name string, args map[string]string) ([]PromptMessage, error) {
	var out []PromptMessage
	err := c.request(ctx, "", "prompts/get "+SanitizeText(name, 200), func(ctx context.Context, s *session) error {
		res, err := s.cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: name, Arguments: maps.Clone(args)})
		if err != nil {
			return err
		}
		left := MaxResourceTextBytes
		for _, m := range res.Messages {
			if m == nil || left <= 0 {
				continue
			}
			role := "user"
			if m.Role == "assistant" {
				role = "assistant"
			}
			text := SanitizeText(contentText([]sdk.Content{m.Content}), left)
			left -= len(text)
			out = append(out, PromptMessage{Role: role, Text: text})
		}
		return nil
	})
	return out, err
}

// resourceTool is a server's resources as one registry tool,
// SERVER__read_resource (ClientOptions.ResourceTool): the model reads a
// resource by its URI; it declares "read" only.
type resourceTool struct {
	c    *Client
	name string
	desc string
}

var resourceToolSchema = json.RawMessage(`{"type":"object","properties":{"uri":{"type":"string","description":"the resource's URI, as the server lists it"}},"required":["uri"],"additionalProperties":false}`)

func (t *resourceTool) Name() string                { return t.name }
func (t *resourceTool) Description() string         { return t.desc }
func (t *resourceTool) Parameters() json.RawMessage { return resourceToolSchema }
func (t *resourceTool) Permissions() []permission.Permission {
	return []permission.Permission{permission.Read}
}

// Execute reads the resource {"uri": ...} names, as a JSON string.
func (t *resourceTool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	var in struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.URI == "" {
		return nil, registry.Errorf(registry.InvalidArguments, t.name, "want {\"uri\": \"...\"}")
	}
	text, err := t.c.ReadResource(ctx, in.URI)
	if err != nil {
		return nil, retool(err, t.name)
	}
	b, _ := json.Marshal(text)
	return b, nil
}

// resourceToolFor builds the read_resource tool of the server's current
// resources, or nil when it has none (or the listing fails: logged).
func (c *Client) resourceToolFor(ctx context.Context) registry.Tool {
	rs, err := c.Resources(ctx)
	if err != nil {
		c.log.Warn("MCP server's resources not listed: no read_resource tool", "server", c.name, "error", err.Error())
		return nil
	}
	if len(rs) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Read a resource of the MCP server %s by its URI. Resources:", c.name)
	for i, r := range rs {
		line := "\n- " + r.URI
		if r.Name != "" {
			line += " (" + r.Name + ")"
		}
		if b.Len()+len(line) > MaxDescriptionBytes-64 {
			fmt.Fprintf(&b, "\n- … and %d more", len(rs)-i)
			break
		}
		b.WriteString(line)
	}
	return &resourceTool{c: c, name: ToolName(c.name, "read_resource"), desc: SanitizeText(b.String(), MaxDescriptionBytes)}
}
