package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/loop"
)

// askPerson asks the person at the terminal about req (and, without a
// terminal, denies it, saying so on stderr): setup.Approver's Ask.
func (c *cli) askPerson(ctx context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
	read := c.answers()
	if read == nil {
		fmt.Fprintf(c.stderr, "agrun: %s needs approval and there is no terminal to ask: denied (approve = \"always\" in its [tools] or [mcp] section, or run on a terminal)\n", safe(req.Tool))
		return loop.Decision{Answer: loop.Deny, By: "non-interactive", Reason: "the call needs a person's approval and none could be asked (agrun runs without a terminal)"}, nil
	}
	// One question at a time: an MCP server's question asked while this
	// one waits would take the person's answer (elicit.go).
	c.asking.Lock()
	defer c.asking.Unlock()
	fmt.Fprintln(c.stderr, setup.DescribeCall(req, workDir()))
	for range 3 {
		fmt.Fprint(c.stderr, "approve? [y/s/a/n] ")
		line, err := read(ctx)
		if err != nil {
			return loop.Decision{By: "user"}, err
		}
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch strings.ToLower(word) {
		case "y", "yes":
			return loop.Decision{Answer: loop.ApproveOnce, By: "user"}, nil
		case "s", "session":
			return loop.Decision{Answer: loop.ApproveSession, By: "user"}, nil
		case "a", "always":
			return loop.Decision{Answer: loop.ApproveAlways, By: "user"}, nil
		case "n", "no":
			reason := strings.TrimSpace(rest)
			if reason == "" {
				fmt.Fprint(c.stderr, "why? (Enter to give no reason) ")
				if reason, err = read(ctx); err != nil {
					return loop.Decision{By: "user"}, err
				}
			}
			return loop.Decision{Answer: loop.Deny, By: "user", Reason: strings.TrimSpace(reason)}, nil
		}
		fmt.Fprintln(c.stderr, "agrun: answer y (once), s (this session), a (always for this tool) or n (no, then why)")
	}
	return loop.Decision{Answer: loop.Deny, By: "user", Reason: "no valid answer was given"}, nil
}

func workDir() string {
	d, _ := os.Getwd()
	return d
}

// answers returns how a question is answered: chat's line reader, or
// lines read from stdin when it is a terminal; nil when no one can be
// asked. Approvals, MCP servers' questions and sampling requests ask
// from several goroutines at once: stdin gets one reader, made once
// (under c.inMu), so that a line is never taken by another's.
func (c *cli) answers() func(ctx context.Context) (string, error) {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if c.lineIn == nil && c.isTTY(c.stdin) {
		lines, errs := readLinesFrom(c.stdin)
		c.lineIn = func(ctx context.Context) (string, error) { return nextLine(ctx, lines, errs) }
	}
	return c.lineIn
}

// isTTY reports whether r is a terminal (c.terminal, for tests, or
// isTerminal).
func (c *cli) isTTY(r any) bool {
	if c.terminal != nil {
		return c.terminal(r)
	}
	return isTerminal(r)
}

// readLinesFrom reads r line by line on its own goroutine (so that a
// question waiting for an answer sees the context end); errs gets nil at
// EOF. The goroutine ends at EOF or with the process.
func readLinesFrom(r io.Reader) (chan string, chan error) {
	lines, errs := make(chan string), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		errs <- sc.Err()
	}()
	return lines, errs
}

// errNoAnswer: the input ended before an answer.
var errNoAnswer = errors.New("the input ended before an answer")

// nextLine waits for a line of lines, the end of the input (errs; put
// back for the next reader, as chat's loop reads it too) or of ctx.
func nextLine(ctx context.Context, lines <-chan string, errs chan error) (string, error) {
	select {
	case l := <-lines:
		return l, nil
	case err := <-errs:
		errs <- err
		if err == nil {
			err = errNoAnswer
		}
		return "", err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// approverFor returns the Approver of a conversation in session id
// (setup.NewApprover): the person at the terminal is asked, except in
// run --json, which pauses calls that need a yes for --approve/--deny.
func (c *cli) approverFor(cfg *config.Config, id string) loop.Approver {
	ask := c.askPerson
	if c.deferApprovals {
		ask = nil
	}
	return setup.NewApprover(cfg, id, ask, c.warnApprovals)
}

// serveApprover is the Approver of `agrun serve` runs and of a worker's
// model steps: the same policy and approvals file; where run would ask,
// the call is left pending (serve asks the run's client, docs/API.md; on
// the cluster the workflow waits for the decision the run's client
// asks for, cluster_run.go). Safe for concurrent runs.
func (c *cli) serveApprover(cfg *config.Config) loop.Approver {
	return setup.NewApprover(cfg, "", nil, c.warnApprovals)
}

// warnApprovals says on stderr that the approvals file failed.
func (c *cli) warnApprovals(err error) {
	fmt.Fprintf(c.stderr, "agrun: approvals: %s\n", safe(err.Error()))
}
