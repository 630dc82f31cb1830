package setup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/session"
)

// Approver is the loop.Approver of the config's approval policy
// ([approvals] ask, approve per tool, MCP server and plug-in), the same
// for `agrun run`, `chat`, `serve` and a worker's model steps: approve =
// "never" denies; a tool approved "always" in the approvals file runs;
// any other call that needs a yes is decided by Ask, or, when Ask is
// nil, left pending (loop.ErrApprovalPending: serve asks the run's
// client, the cluster's workflow waits, run --json stops for --approve).
type Approver struct {
	// Config holds the policy.
	Config *config.Config
	// Store is the approvals file (nil: none is read or written).
	Store *session.Approvals
	// Session is the session of the calls, recorded with an "always".
	Session string
	// Ask asks a person; nil: the call is left pending. An answer
	// ApproveAlways by "user" is added to Store.
	Ask func(context.Context, loop.ApprovalRequest) (loop.Decision, error)
	// Warn is told of an approvals file that cannot be read or written
	// (nil: nothing is said); the call is decided as if it had no entry.
	Warn func(error)
}

var _ loop.Approver = (*Approver)(nil)

// NewApprover is the Approver of cfg for session id, reading and writing
// the approvals file of cfg's sessions folder; nil when the
// configuration asks about nothing (no [approvals] ask, no approve key):
// the loop then runs every call, as before approvals.
func NewApprover(cfg *config.Config, id string, ask func(context.Context, loop.ApprovalRequest) (loop.Decision, error), warn func(error)) loop.Approver {
	if !AsksAnything(cfg) {
		return nil
	}
	return &Approver{Config: cfg, Store: session.OpenApprovals(SessionsDir(cfg)), Session: id, Ask: ask, Warn: warn}
}

// NeedsApproval implements loop.Approver.
func (a *Approver) NeedsApproval(req loop.ApprovalRequest) bool {
	return a.Config.ApprovalFor(req.Tool, req.Grant.Server, req.Grant.Uses()) != config.ApproveAlways
}

// Approve implements loop.Approver.
func (a *Approver) Approve(ctx context.Context, req loop.ApprovalRequest) (loop.Decision, error) {
	if a.Config.ApprovalFor(req.Tool, req.Grant.Server, req.Grant.Uses()) == config.ApproveNever {
		return loop.Decision{Answer: loop.Deny, By: "config", Reason: `the configuration does not allow this tool (approve = "never")`}, nil
	}
	if a.Store != nil {
		ok, err := a.Store.Has(req.Tool, req.Grant)
		if err != nil {
			a.warn(err)
		}
		if ok {
			return loop.Decision{Answer: loop.ApproveAlways, By: "approvals file"}, nil
		}
	}
	if a.Ask == nil {
		return loop.Decision{}, loop.ErrApprovalPending
	}
	d, err := a.Ask(ctx, req)
	if err == nil && d.Answer == loop.ApproveAlways && d.By == "user" && a.Store != nil {
		if err := a.Store.Add(session.StandingApproval{Tool: req.Tool, Grant: req.Grant, Time: time.Now().UTC(), By: "user", Session: a.Session}); err != nil {
			a.warn(fmt.Errorf("not saved (approved for this session only): %w", err))
		}
	}
	return d, err
}

func (a *Approver) warn(err error) {
	if a.Warn != nil {
		a.Warn(err)
	}
}

// MCPApproval applies the approval policy to the calls of `agrun mcp
// serve`'s clients as `agrun run` applies it to a model's (the clients
// of an MCP server are usually agents driven by one): approve = "never"
// refuses, a call that needs a yes and is not approved "always" in the
// approvals file is asked of the client's user through elicitation
// (mcp.Approval, with DescribeCall's question relative to cwd), and
// refused when the client offers none. Nil when the configuration asks
// about nothing.
func MCPApproval(cfg *config.Config, cwd string) func(mcp.ApprovalCall) mcp.Approval {
	if !AsksAnything(cfg) {
		return nil
	}
	store := session.OpenApprovals(SessionsDir(cfg))
	return func(call mcp.ApprovalCall) mcp.Approval {
		switch cfg.ApprovalFor(call.Tool, call.Grant.Server, call.Grant.Uses()) {
		case config.ApproveAlways:
			return mcp.Approval{}
		case config.ApproveNever:
			return mcp.Approval{Refuse: `the configuration does not allow this tool (approve = "never")`}
		}
		if ok, _ := store.Has(call.Tool, call.Grant); ok {
			return mcp.Approval{}
		}
		req := loop.ApprovalRequest{Tool: call.Tool, Arguments: textsafe.CleanBytes(call.Arguments, 2*MaxQuestionArgs), Grant: call.Grant}
		return mcp.Approval{Ask: true, Question: DescribeCall(req, cwd)} // DescribeCall begins "agrun: "
	}
}

// MaxQuestionArgs is how much of a call's arguments DescribeCall shows.
const MaxQuestionArgs = 2 << 10

// DescribeCall is what a person is asked about a call, on one line of
// what the call can do and one of its limits, then the answers,
// everything cleaned for a terminal (no text of the model's or a
// server's can start a line): e.g. "write_note wants to write to /notes
// (host ./notes, rw, max 64MiB) with {"title":"x"}". Host paths inside
// cwd are shown relative to it.
func DescribeCall(req loop.ApprovalRequest, cwd string) string {
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
	full := compactJSON([]byte(req.Arguments))
	args := OneLine(textsafe.Truncate(full, MaxQuestionArgs))
	if len(full) > MaxQuestionArgs {
		args += fmt.Sprintf(" [cut: the arguments are %d bytes; the tool receives them all — answer n if you cannot see what it will do]", len(full))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agrun: %s wants to %s with %s\n", OneLine(req.Tool), OneLine(strings.Join(does, ", ")), args)
	fmt.Fprintf(&b, "  permissions: %s", OneLine(strings.Join(perms, ", ")))
	if len(limits) > 0 {
		fmt.Fprintf(&b, "; limits: %s", strings.Join(limits, ", "))
	}
	b.WriteString("\n  [y] once, [s] for this session, [a] always for this tool, [n] no (say why)")
	return b.String()
}

// OneLine is s escaped for a terminal (textsafe.Escape) with newlines
// and tabs escaped too.
func OneLine(s string) string {
	return strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(textsafe.Escape(s))
}

// compactJSON is raw without insignificant space (raw itself when it is
// not JSON).
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// shortPath shows a host path relative to cwd when it is inside it
// ("./notes"), else as it is.
func shortPath(p, cwd string) string {
	if cwd == "" {
		return p
	}
	if rel, err := filepath.Rel(cwd, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "." + string(filepath.Separator) + rel
	}
	return p
}
