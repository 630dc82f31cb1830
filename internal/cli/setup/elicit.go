package setup

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/mcp"
)

// Elicit returns ask (Hooks.Elicit: the person answers MCP servers'
// questions) with each answer recorded in the run in progress as an
// approval decision is (queued, and handed over by Flush on the run's
// goroutine): the tool "elicitation:SERVER", the question as its
// arguments (cleaned, at most 2 KiB), the answer "once" for an accepted
// question (the reason names the fields answered, never their values:
// they went to the server, not into the session), "deny" for a declined
// or cancelled one, and who decided: "user", or "non-interactive" when
// ask returns ErrNoOneToAsk (no terminal, run --json), in which case the
// question is declined. ask nil: nil (no elicitation is offered). A nil
// Sampler records nothing (and declines as well).
func (s *Sampler) Elicit(ask func(context.Context, *mcp.Elicitation) (*mcp.ElicitAnswer, error)) func(context.Context, *mcp.Elicitation) (*mcp.ElicitAnswer, error) {
	if ask == nil {
		return ask
	}
	return func(ctx context.Context, q *mcp.Elicitation) (*mcp.ElicitAnswer, error) {
		ans, err := ask(ctx, q)
		what := textsafe.Truncate(q.Message, 2<<10)
		tool := "elicitation:" + q.Server
		switch {
		case errors.Is(err, ErrNoOneToAsk):
			s.decided(tool, what, loop.Decision{Answer: loop.Deny, By: "non-interactive", Reason: "the server asked a question and no one could be asked: declined"})
			return &mcp.ElicitAnswer{Action: "decline"}, nil
		case err != nil:
			s.decided(tool, what, loop.Decision{Answer: loop.Deny, By: "user", Reason: "no answer: " + textsafe.Clean(err.Error(), 300)})
			return nil, err
		case ans != nil && ans.Action == "accept":
			names := make([]string, 0, len(ans.Content))
			for k := range ans.Content {
				names = append(names, k)
			}
			sort.Strings(names)
			s.decided(tool, what, loop.Decision{Answer: loop.ApproveOnce, By: "user", Reason: textsafe.Clean("answered: "+strings.Join(names, ", "), 1<<10)})
		case ans != nil && ans.Action == "cancel":
			s.decided(tool, what, loop.Decision{Answer: loop.Deny, By: "user", Reason: "cancelled"})
		default:
			s.decided(tool, what, loop.Decision{Answer: loop.Deny, By: "user", Reason: "declined"})
		}
		return ans, nil
	}
}

// MCPDecision is a decision about an MCP server's request (sampling,
// elicitation) as `run --json` prints it, once it is recorded, e.g.
// {"type":"mcp_decision","tool":"elicitation:shop","request":"Which
// colour?","answer":"deny","by":"non-interactive","reason":"..."}: a
// script sees what was decided for it, as the session keeps it.
type MCPDecision struct {
	Type    string      `json:"type"` // "mcp_decision"
	Tool    string      `json:"tool"` // "sampling:SERVER" or "elicitation:SERVER"
	Request string      `json:"request,omitempty"`
	Answer  loop.Answer `json:"answer"`
	By      string      `json:"by,omitempty"`
	Reason  string      `json:"reason,omitempty"`
}

// MCPDecisionOf is r as run --json prints it.
func MCPDecisionOf(r loop.DecisionRecord) MCPDecision {
	return MCPDecision{Type: "mcp_decision", Tool: r.Tool, Request: r.Arguments, Answer: r.Answer, By: r.By, Reason: r.Reason}
}
