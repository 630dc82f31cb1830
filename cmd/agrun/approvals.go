package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/session"
)

// cliApprover is the loop.Approver of `run` and `chat`: the config's
// policy ([approvals] ask, approve per tool and MCP server) says which
// calls need a yes; the approvals file answers for tools approved
// "always"; otherwise the person at the terminal is asked. Without a
// terminal (stdin is not one) a call that needs a yes is denied, and the
// denial recorded like any decision.
type cliApprover struct {
	c       *cli
	cfg     *config.Config
	store   *session.Approvals
	session string
	// server: the approver of `agrun serve` runs: a call that needs a yes
	// (and is not approved "always") is left to the server, which asks
	// the run's client.
	server bool
	// cluster: the approver of a worker's model steps: a call that needs
	// a yes (and is not approved "always") is left to a person, whom the
	// run's client asks (cluster_run.go); the workflow waits for the
	// decision.
	cluster bool
}

var _ loop.Approver = (*cliApprover)(nil)

// NeedsApproval implements loop.Approver.
func (a *cliApprover) NeedsApproval(req loop.ApprovalRequest) bool {
	return a.cfg.ApprovalFor(req.Tool, req.Grant.Server, req.Grant.Uses()) != config.ApproveAlways
}

// Approve implements loop.Approver.
func (a *cliApprover) Approve(ctx context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
	if a.cfg.ApprovalFor(req.Tool, req.Grant.Server, req.Grant.Uses()) == config.ApproveNever {
		return loop.Decision{Answer: loop.Deny, By: "config", Reason: `the configuration does not allow this tool (approve = "never")`}, nil
	}
	if a.store != nil {
		ok, err := a.store.Has(req.Tool, req.Grant)
		if err != nil {
			fmt.Fprintf(a.c.stderr, "agrun: approvals: %s\n", safe(err.Error()))
		}
		if ok {
			return loop.Decision{Answer: loop.ApproveAlways, By: "approvals file"}, nil
		}
	}
	if a.c.deferApprovals {
		return loop.Decision{}, loop.ErrApprovalPending // decided by run --approve/--deny
	}
	if a.server || a.cluster {
		// agrun serve asks the run's client (server.runApprover: an
		// approval_required event, POST /v1/runs/ID/approvals); on the
		// cluster the workflow waits for the decision, which the run's
		// client asks for (cluster_run.go).
		return loop.Decision{}, loop.ErrApprovalPending
	}
	return a.askPerson(ctx, req)
}

// askPerson asks the person at the terminal about req (and, without a
// terminal, denies it, saying so on stderr).
func (a *cliApprover) askPerson(ctx context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
	read := a.c.answers()
	if read == nil {
		fmt.Fprintf(a.c.stderr, "agrun: %s needs approval and there is no terminal to ask: denied (approve = \"always\" in its [tools] or [mcp] section, or run on a terminal)\n", safe(req.Tool))
		return loop.Decision{Answer: loop.Deny, By: "non-interactive", Reason: "the call needs a person's approval and none could be asked (agrun runs without a terminal)"}, nil
	}
	// One question at a time: an MCP server's question asked while this
	// one waits would take the person's answer (elicit.go).
	a.c.asking.Lock()
	defer a.c.asking.Unlock()
	fmt.Fprintln(a.c.stderr, question(req, workDir()))
	for range 3 {
		fmt.Fprint(a.c.stderr, "approve? [y/s/a/n] ")
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
			if a.store != nil {
				err := a.store.Add(session.StandingApproval{Tool: req.Tool, Grant: req.Grant, Time: time.Now().UTC(), By: "user", Session: a.session})
				if err != nil {
					fmt.Fprintf(a.c.stderr, "agrun: approvals: not saved (approved for this session only): %s\n", safe(err.Error()))
				}
			}
			return loop.Decision{Answer: loop.ApproveAlways, By: "user"}, nil
		case "n", "no":
			reason := strings.TrimSpace(rest)
			if reason == "" {
				fmt.Fprint(a.c.stderr, "why? (Enter to give no reason) ")
				if reason, err = read(ctx); err != nil {
					return loop.Decision{By: "user"}, err
				}
			}
			return loop.Decision{Answer: loop.Deny, By: "user", Reason: strings.TrimSpace(reason)}, nil
		}
		fmt.Fprintln(a.c.stderr, "agrun: answer y (once), s (this session), a (always for this tool) or n (no, then why)")
	}
	return loop.Decision{Answer: loop.Deny, By: "user", Reason: "no valid answer was given"}, nil
}

// maxQuestionArgs is how much of a call's arguments the question shows.
const maxQuestionArgs = 2 << 10

// question is what a person is asked about a call, on one line of what
// the call can do and one of its limits, everything cleaned for the
// terminal: e.g. "write_note wants to write to /notes (host ./notes, rw,
// max 64MiB) with {"title":"x"}".
func question(req loop.ApprovalRequest, cwd string) string {
	g := req.Grant
	var does []string
	for _, m := range g.Mounts {
		host := shortPath(m.Host, cwd)
		switch m.Mode {
		case registry.ReadWrite, registry.ReadWriteDelete:
			verb := "write to"
			if m.Mode.Delete() {
				verb = "write and delete in"
			}
			limit := ""
			if g.MaxWriteBytes > 0 {
				limit = ", max " + runtime.FormatBytes(g.MaxWriteBytes)
			}
			does = append(does, fmt.Sprintf("%s %s (host %s, %s%s)", verb, m.Guest, host, m.Mode, limit))
		default:
			does = append(does, fmt.Sprintf("read %s (host %s, ro)", m.Guest, host))
		}
	}
	if len(g.AllowedHosts) > 0 {
		reach := "reach " + strings.Join(g.AllowedHosts, ", ")
		if g.AllowPrivate {
			reach += " (private addresses allowed)"
		}
		does = append(does, reach)
	}
	if g.Source == "mcp" {
		what := "run on MCP server " + g.Server
		if len(g.Hints) > 0 {
			what += " (it says: " + strings.ReplaceAll(strings.Join(g.Hints, ", "), "_", " ") + ")"
		}
		does = append(does, what)
	}
	if len(does) == 0 {
		does = append(does, "run")
	}
	perms := make([]string, 0, len(g.Permissions))
	for _, p := range g.Permissions {
		perms = append(perms, p.String())
	}
	var limits []string
	if g.Timeout > 0 {
		limits = append(limits, "timeout "+g.Timeout.String())
	}
	if g.MemoryBytes > 0 {
		limits = append(limits, "memory "+runtime.FormatBytes(g.MemoryBytes))
	}
	if g.MaxOutputBytes > 0 {
		limits = append(limits, "output "+runtime.FormatBytes(g.MaxOutputBytes))
	}
	// Arguments up to 2 KiB, whole; longer ones cut with their full size
	// said, so that nothing after the cut passes for absent.
	full := compact([]byte(req.Arguments))
	args := oneLine(textsafe.Truncate(full, maxQuestionArgs))
	if len(full) > maxQuestionArgs {
		args += fmt.Sprintf(" [cut: the arguments are %d bytes; the tool receives them all — answer n if you cannot see what it will do]", len(full))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agrun: %s wants to %s with %s\n", oneLine(req.Tool), oneLine(strings.Join(does, ", ")), args)
	fmt.Fprintf(&b, "  permissions: %s", oneLine(strings.Join(perms, ", ")))
	if len(limits) > 0 {
		fmt.Fprintf(&b, "; limits: %s", strings.Join(limits, ", "))
	}
	b.WriteString("\n  [y] once, [s] for this session, [a] always for this tool, [n] no (say why)")
	return b.String()
}

// oneLine is safe(s) with newlines and tabs escaped too, so that text
// from a model or a server cannot start a line of the question.
func oneLine(s string) string {
	return strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(safe(s))
}

// shortPath shows a host path relative to the working directory when it
// is inside it ("./notes"), else as it is.
func shortPath(p, cwd string) string {
	if cwd == "" {
		return p
	}
	if rel, err := filepath.Rel(cwd, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "." + string(filepath.Separator) + rel
	}
	return p
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

// approverFor returns the Approver of a conversation in session id, or
// nil when the configuration asks about nothing (no [approvals] ask, no
// approve key): the loop then runs every call, as before approvals.
func (c *cli) approverFor(cfg *config.Config, id string) loop.Approver {
	if !setup.AsksAnything(cfg) {
		return nil
	}
	return &cliApprover{c: c, cfg: cfg, store: session.OpenApprovals(setup.SessionsDir(cfg)), session: id}
}

// serveApprover is the Approver of `agrun serve` runs: the same policy,
// the approvals file, and a denial where run would ask. Nil when the
// configuration asks about nothing. Safe for concurrent runs.
func (c *cli) serveApprover(cfg *config.Config) loop.Approver {
	if !setup.AsksAnything(cfg) {
		return nil
	}
	return &cliApprover{c: c, cfg: cfg, store: session.OpenApprovals(setup.SessionsDir(cfg)), server: true}
}
