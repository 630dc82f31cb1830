package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/mcp"
)

// elicit answers an MCP server's question for the person (elicitation,
// form mode) at the terminal, as an approval is asked: the server's name
// and message (cleaned by package mcp, escaped here), then each field.
// Without a terminal, and in run --json, no one is asked: the question
// is declined (setup.ErrNoOneToAsk: the Sampler records it so), and said
// on stderr.
func (c *cli) elicit(ctx context.Context, q *mcp.Elicitation) (*mcp.ElicitAnswer, error) {
	read := c.answers()
	if read == nil || c.deferApprovals {
		fmt.Fprintf(c.stderr, "agrun: warning: MCP server %s asked a question and there is no one to ask: declined (%s)\n", safe(q.Server), safe(firstLine(q.Message, 200)))
		return &mcp.ElicitAnswer{Action: "decline"}, setup.ErrNoOneToAsk
	}
	// One exchange at a time (an approval waiting for an answer is
	// answered first), and the server's text set off line by line, so
	// that it cannot draw agrun's own prompts.
	c.asking.Lock()
	defer c.asking.Unlock()
	fmt.Fprintf(c.stderr, "agrun: MCP server %s asks:\n%s\n", safe(q.Server), quoted(q.Message))
	for _, f := range q.Fields {
		fmt.Fprintf(c.stderr, "%s\n", quoted(f.String()))
	}
	for range 3 {
		fmt.Fprint(c.stderr, "answer? [y/n/c] (y: fill in the fields; n: decline; c: cancel) ")
		line, err := read(ctx)
		if err != nil {
			return nil, err
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			content, err := c.elicitFields(ctx, read, q.Fields)
			if err != nil {
				return nil, err
			}
			return &mcp.ElicitAnswer{Action: "accept", Content: content}, nil
		case "n", "no":
			return &mcp.ElicitAnswer{Action: "decline"}, nil
		case "c", "cancel":
			return &mcp.ElicitAnswer{Action: "cancel"}, nil
		}
	}
	return &mcp.ElicitAnswer{Action: "decline"}, nil
}

// quoted is a server's text for the terminal: escaped, every line
// prefixed with "  | ".
func quoted(s string) string {
	lines := strings.Split(safe(s), "\n")
	for i, l := range lines {
		lines[i] = "  | " + l
	}
	return strings.Join(lines, "\n")
}

// elicitFields reads each field's value: an empty line leaves an optional
// field out (the server's default applies); a value that does not fit the
// field's type is asked again, three times at most.
func (c *cli) elicitFields(ctx context.Context, read func(context.Context) (string, error), fields []mcp.ElicitField) (map[string]any, error) {
	content := map[string]any{}
	for _, f := range fields {
		for try := 0; ; try++ {
			fmt.Fprintf(c.stderr, "%s: ", safe(f.Name))
			line, err := read(ctx)
			if err != nil {
				return nil, err
			}
			line = strings.TrimSpace(line)
			if line == "" && (!f.Required || f.Default != nil) {
				break
			}
			v, err := f.Parse(line)
			if err == nil {
				content[f.Name] = v
				break
			}
			if try == 2 {
				return nil, fmt.Errorf("MCP server question: %s: %w", safe(f.Name), err)
			}
			fmt.Fprintf(c.stderr, "agrun: %s\n", safe(err.Error()))
		}
	}
	return content, nil
}

// progressLines is an MCP server's progress shown on a terminal: a line
// "agrun: TOOL: 3/10 message" at most once a second per tool (and the
// last step), nothing when stderr is not a terminal.
type progressLines struct {
	c    *cli
	mu   sync.Mutex
	last map[string]time.Time
}

func (p *progressLines) show(pr mcp.Progress) {
	if !p.c.isTTY(p.c.stderr) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last[pr.Tool]) < time.Second && (pr.Total == 0 || pr.Progress < pr.Total) {
		return
	}
	p.last[pr.Tool] = now
	of := strconv.FormatFloat(pr.Progress, 'f', -1, 64)
	if pr.Total > 0 {
		of += "/" + strconv.FormatFloat(pr.Total, 'f', -1, 64)
	}
	fmt.Fprintf(p.c.stderr, "agrun: %s: %s %s\n", safe(pr.Tool), of, safe(pr.Message))
}

// maxSamplingShown is how much of a sampling request's text the person
// is shown.
const maxSamplingShown = 4 << 10

// askSampling asks the person whether an MCP server may have the model
// write for it (sampling = "ask"), as an approval is asked: the server's
// name, the budget, and its messages (cleaned by package mcp, escaped
// and set off here). Without a terminal, or in run --json, no one is
// asked: setup.ErrNoOneToAsk, and it is said on stderr.
func (c *cli) askSampling(ctx context.Context, q *setup.SamplingQuestion) (bool, error) {
	read := c.answers()
	if read == nil || c.deferApprovals {
		fmt.Fprintf(c.stderr, "agrun: warning: MCP server %s asked agrun's model to write for it (sampling) and there is no one to ask: declined ([mcp.%s] sampling = \"allow\" serves it unasked)\n", safe(q.Server), safe(q.Server))
		return false, setup.ErrNoOneToAsk
	}
	c.asking.Lock()
	defer c.asking.Unlock()
	where := "this run"
	if !q.InRun {
		where = "this process"
	}
	fmt.Fprintf(c.stderr, "agrun: MCP server %s asks agrun's model to write for it (sampling: at most %d tokens; its sampling in %s: %d of %d tokens used):\n", safe(q.Server), q.MaxTokens, where, q.Used, q.Budget)
	var b strings.Builder
	if q.System != "" {
		b.WriteString("system: " + q.System + "\n")
	}
	for _, m := range q.Messages {
		b.WriteString(m.Role + ": " + m.Text + "\n")
	}
	text := strings.TrimSuffix(b.String(), "\n")
	if len(text) > maxSamplingShown {
		text = textsafe.Truncate(text, maxSamplingShown) + fmt.Sprintf("… (%d more bytes)", len(text)-maxSamplingShown)
	}
	fmt.Fprintln(c.stderr, quoted(text))
	for range 3 {
		fmt.Fprint(c.stderr, "allow? [y/n] ")
		line, err := read(ctx)
		if err != nil {
			return false, err
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return true, nil
		case "n", "no":
			return false, nil
		}
	}
	return false, nil
}
