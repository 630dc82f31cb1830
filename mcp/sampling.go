//lint:file-ignore SA1019 sampling is served to servers on protocol versions before 2026-07-28 (SEP-2577 deprecates it, with a 12-month window; docs/MCP.md)

package mcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// SamplingRequest is a server's request for a reply from agrun's model
// (sampling/createMessage), as ClientOptions.Sample gets it: bounded
// (MaxSamplingMessages, MaxSamplingTextBytes), every string cleaned
// (SanitizeText), MaxTokens capped. It is untrusted: what a server wants
// the model to read.
type SamplingRequest struct {
	Server   string            // the server's name (the Client's)
	System   string            // the server's system prompt, "" if none
	Messages []SamplingMessage // the conversation, oldest first
	// MaxTokens is the server's maxTokens, capped by
	// ClientOptions.SamplingMaxTokens (a request without one gets the
	// cap).
	MaxTokens int64
	// Requested is the maxTokens the server asked for, before the cap.
	Requested int64
	// ModelHints are the names the server would prefer (cleaned, at most
	// 4): for the person's information; agrun answers with its own model.
	ModelHints []string
}

// SamplingMessage is one text message of a SamplingRequest.
type SamplingMessage struct {
	Role string // "user" or "assistant"
	Text string
}

// SamplingReply is what ClientOptions.Sample answers: the model's text,
// the model that wrote it, and why it stopped ("endTurn", "maxTokens").
type SamplingReply struct {
	Text, Model, StopReason string
}

// Bounds of sampling requests from one server.
const (
	// MaxSamplingMessages bounds a request's messages; a longer one is
	// refused.
	MaxSamplingMessages = 64
	// MaxSamplingTextBytes bounds a request's text, system prompt and
	// messages together; a larger one is refused, not cut (a cut prompt
	// would ask the model something else).
	MaxSamplingTextBytes = 64 << 10
	// DefaultSamplingMaxTokens is ClientOptions.SamplingMaxTokens when
	// zero: the most tokens one request may have the model write.
	DefaultSamplingMaxTokens = 1024
	// MaxSamplingsPerMinute bounds how often a server may sample; beyond
	// it, requests are refused unasked.
	MaxSamplingsPerMinute = 10
)

// CodeSamplingRefused is the JSON-RPC error code of a sampling request
// agrun did not serve (the person or the config declined it, a budget is
// spent, the request is out of bounds): MCP's "user rejected sampling
// request" code.
const CodeSamplingRefused = -1

// SamplingRefused is a sampling request that agrun did not serve; its
// message goes to the server. ClientOptions.Sample returns one to
// decline with a reason.
type SamplingRefused struct{ Reason string }

// Error implements error: "sampling request refused: REASON".
func (e *SamplingRefused) Error() string { return "sampling request refused: " + e.Reason }

// refuse is a refusal as the server gets it, and as the log says it.
func (c *Client) refuse(reason string) error {
	c.log.Warn("sampling request refused", "server", c.name, "reason", reason)
	return &jsonrpc.Error{Code: CodeSamplingRefused, Message: "sampling request refused by agrun: " + reason}
}

// offerSampling declares the sampling capability, without tools (a
// request offering tools is refused), and handles the requests.
func (c *Client) offerSampling(so *sdk.ClientOptions) {
	so.Capabilities.Sampling = &sdk.SamplingCapabilities{}
	so.CreateMessageWithToolsHandler = c.sample
}

// sample is the go-sdk's CreateMessageWithToolsHandler: the request
// bounded and cleaned, then ClientOptions.Sample. It takes the "with
// tools" form so that a request offering tools is refused, not run
// without them.
func (c *Client) sample(ctx context.Context, req *sdk.CreateMessageWithToolsRequest) (*sdk.CreateMessageWithToolsResult, error) {
	p := req.Params
	if p == nil {
		return nil, c.refuse("no parameters")
	}
	if len(p.Tools) > 0 || p.ToolChoice != nil {
		return nil, c.refuse("tools in sampling are not supported")
	}
	if len(p.Messages) == 0 || len(p.Messages) > MaxSamplingMessages {
		return nil, c.refuse(fmt.Sprintf("%d messages: want 1 to %d", len(p.Messages), MaxSamplingMessages))
	}
	size := len(p.SystemPrompt)
	r := &SamplingRequest{Server: c.name, Requested: p.MaxTokens}
	for i, m := range p.Messages {
		if m == nil || (m.Role != "user" && m.Role != "assistant") {
			return nil, c.refuse(fmt.Sprintf("message %d: the role must be user or assistant", i+1))
		}
		if len(m.Content) != 1 {
			return nil, c.refuse(fmt.Sprintf("message %d: %d content blocks; agrun samples one text block per message", i+1, len(m.Content)))
		}
		t, ok := m.Content[0].(*sdk.TextContent)
		if !ok {
			return nil, c.refuse(fmt.Sprintf("message %d is %s content; agrun samples text only (no images, audio or tool use)", i+1, contentKind(m.Content[0])))
		}
		size += len(t.Text)
		if size > MaxSamplingTextBytes {
			return nil, c.refuse(fmt.Sprintf("its text is over %d bytes", MaxSamplingTextBytes))
		}
		r.Messages = append(r.Messages, SamplingMessage{Role: string(m.Role), Text: SanitizeText(t.Text, MaxSamplingTextBytes)})
	}
	if size > MaxSamplingTextBytes {
		return nil, c.refuse(fmt.Sprintf("its text is over %d bytes", MaxSamplingTextBytes))
	}
	r.System = SanitizeText(p.SystemPrompt, MaxSamplingTextBytes)
	limit := int64(c.opts.SamplingMaxTokens)
	r.MaxTokens = min(p.MaxTokens, limit)
	if r.MaxTokens <= 0 {
		r.MaxTokens = limit
	}
	if mp := p.ModelPreferences; mp != nil {
		for _, h := range mp.Hints {
			if h != nil && len(r.ModelHints) < 4 {
				r.ModelHints = append(r.ModelHints, SanitizeText(h.Name, 100))
			}
		}
	}
	if !c.sampleGate.admit(time.Now(), MaxSamplingsPerMinute) {
		return nil, c.refuse(fmt.Sprintf("another sampling request of this server is in progress, or it asked more than %d times a minute", MaxSamplingsPerMinute))
	}
	defer c.sampleGate.done()
	rep, err := c.opts.Sample(ctx, r)
	if err != nil {
		var no *SamplingRefused
		if errors.As(err, &no) {
			return nil, c.refuse(no.Reason)
		}
		return nil, c.refuse(SanitizeText(err.Error(), maxErrorText))
	}
	if rep == nil {
		return nil, c.refuse("declined")
	}
	stop := rep.StopReason
	if stop == "" {
		stop = "endTurn"
	}
	return &sdk.CreateMessageWithToolsResult{
		Content:    []sdk.Content{&sdk.TextContent{Text: rep.Text}},
		Model:      rep.Model,
		Role:       "assistant",
		StopReason: stop,
	}, nil
}

// contentKind names a content block's type for a refusal.
func contentKind(c sdk.Content) string {
	switch c.(type) {
	case *sdk.ImageContent:
		return "image"
	case *sdk.AudioContent:
		return "audio"
	case *sdk.ToolUseContent:
		return "tool_use"
	case *sdk.ToolResultContent:
		return "tool_result"
	case nil:
		return "empty"
	}
	return "non-text"
}
