package setup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/mcp"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// approvalsConfig is a config that asks about "write", with the tool
// "banned" never allowed, its sessions (and approvals file) in a
// temporary folder.
func approvalsConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse("agrun.toml", []byte("[approvals]\nask = [\"write\"]\n[tools.banned]\nwasm = \"x.wasm\"\napprove = \"never\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sessions.Dir = t.TempDir()
	return cfg
}

var writeGrant = registry.Grant{Source: "wasm", Permissions: []permission.Permission{permission.Write}}

// TestApproverPolicy: approve = "never" denies without asking; an
// "always" answer by the person is kept in the approvals file and
// answers the next call of the tool without asking; with no Ask the call
// is left pending; a call the policy does not ask about needs no
// approval; and a config that asks about nothing has no Approver.
func TestApproverPolicy(t *testing.T) {
	ctx := context.Background()
	cfg := approvalsConfig(t)
	asked := 0
	ask := func(context.Context, loop.ApprovalRequest) (loop.Decision, error) {
		asked++
		return loop.Decision{Answer: loop.ApproveAlways, By: "user"}, nil
	}
	a := NewApprover(cfg, "s1", ask, func(err error) { t.Errorf("warned: %v", err) })
	if a == nil {
		t.Fatal("no Approver for a config that asks")
	}
	if a.NeedsApproval(loop.ApprovalRequest{Tool: "reader", Grant: registry.Grant{Permissions: []permission.Permission{permission.Read}}}) {
		t.Error("a read-only call needs approval; the config asks about write only")
	}
	banned := loop.ApprovalRequest{Tool: "banned", Grant: writeGrant}
	if d, err := a.Approve(ctx, banned); err != nil || d.Answer != loop.Deny || d.By != "config" || asked != 0 {
		t.Errorf("approve = never: %+v, %v (asked %d times)", d, err, asked)
	}
	req := loop.ApprovalRequest{Tool: "writer", Grant: writeGrant}
	if !a.NeedsApproval(req) {
		t.Fatal("a write call needs no approval")
	}
	if d, err := a.Approve(ctx, req); err != nil || d.Answer != loop.ApproveAlways || asked != 1 {
		t.Fatalf("first call: %+v, %v (asked %d times)", d, err, asked)
	}
	if d, err := a.Approve(ctx, req); err != nil || d.Answer != loop.ApproveAlways || d.By != "approvals file" || asked != 1 {
		t.Errorf("second call: %+v, %v (asked %d times), want the approvals file's answer", d, err, asked)
	}
	// Another Approver of the same folder (a server's: no Ask) reads it too.
	srv := NewApprover(cfg, "", nil, nil)
	if d, err := srv.Approve(ctx, req); err != nil || d.By != "approvals file" {
		t.Errorf("serve approver, approved tool: %+v, %v", d, err)
	}
	if _, err := srv.Approve(ctx, loop.ApprovalRequest{Tool: "other", Grant: writeGrant}); !errors.Is(err, loop.ErrApprovalPending) {
		t.Errorf("serve approver, unapproved tool: %v, want ErrApprovalPending", err)
	}
	if NewApprover(config.Default(), "", ask, nil) != nil {
		t.Error("an Approver for a config that asks about nothing")
	}
}

// TestApproverWarnsOfAFailedFile: an approvals file that cannot be
// read or written is said (Warn), the "always" not kept said so, and
// the person's answer still holds for the call.
func TestApproverWarnsOfAFailedFile(t *testing.T) {
	cfg := approvalsConfig(t)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Sessions.Dir = notDir // the approvals file would be inside a file
	var warned []string
	a := NewApprover(cfg, "s1", func(context.Context, loop.ApprovalRequest) (loop.Decision, error) {
		return loop.Decision{Answer: loop.ApproveAlways, By: "user"}, nil
	}, func(err error) { warned = append(warned, err.Error()) })
	if d, err := a.Approve(context.Background(), loop.ApprovalRequest{Tool: "writer", Grant: writeGrant}); err != nil || d.Answer != loop.ApproveAlways {
		t.Fatalf("%+v, %v", d, err)
	}
	if len(warned) != 2 || !strings.HasPrefix(warned[1], "not saved (approved for this session only): ") {
		t.Errorf("warnings %q, want the failed read and the failed save", warned)
	}
}

// TestDescribeCall: the question names what the call can do (mounts
// relative to the working directory, hosts, the MCP server and its
// hints), its permissions and limits; text from a model or a server
// cannot start a line of it; long arguments are cut, saying their size.
func TestDescribeCall(t *testing.T) {
	cwd := t.TempDir()
	req := loop.ApprovalRequest{
		Tool:      "write_note",
		Arguments: `{"title": "x"}`,
		Grant: registry.Grant{
			Permissions:   []permission.Permission{permission.Filesystem, permission.Write},
			Mounts:        []registry.GrantMount{{Guest: "/notes", Host: filepath.Join(cwd, "notes"), Mode: registry.ReadWrite}, {Guest: "/etc", Host: "/etc", Mode: registry.ReadOnly}},
			AllowedHosts:  []string{"api.example.com"},
			MaxWriteBytes: 64 << 20,
			Timeout:       5 * time.Second,
		},
	}
	want := "agrun: write_note wants to write to /notes (host ./notes, rw, max 64MiB), read /etc (host /etc, ro), reach api.example.com with {\"title\":\"x\"}\n" +
		"  permissions: filesystem, write; limits: timeout 5s\n" +
		"  [y] once, [s] for this session, [a] always for this tool, [n] no (say why)"
	if got := DescribeCall(req, cwd); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	evil := loop.ApprovalRequest{Tool: "srv__t\nagrun: approve? [y]", Arguments: `"` + strings.Repeat("a", 3000) + `"`,
		Grant: registry.Grant{Source: "mcp", Server: "srv", Hints: []string{"open_world"}}}
	got := DescribeCall(evil, cwd)
	if strings.Count(got, "\n") != 2 || !strings.Contains(got, `srv__t\nagrun`) {
		t.Errorf("the tool's name starts a line:\n%s", got)
	}
	if !strings.Contains(got, "run on MCP server srv (it says: open world)") || !strings.Contains(got, "[cut: the arguments are 3002 bytes;") {
		t.Errorf("question:\n%s", got)
	}
}

// TestMCPApproval: `mcp serve`'s clients get the same policy: "never"
// refuses, an asked call is a question, an unasked one runs; none when
// the config asks about nothing.
func TestMCPApproval(t *testing.T) {
	cfg := approvalsConfig(t)
	f := MCPApproval(cfg, "")
	if a := f(mcp.ApprovalCall{Tool: "banned", Grant: writeGrant}); a.Refuse == "" {
		t.Errorf("never: %+v", a)
	}
	if a := f(mcp.ApprovalCall{Tool: "writer", Arguments: []byte(`{}`), Grant: writeGrant}); !a.Ask || !strings.HasPrefix(a.Question, "agrun: writer wants to run with {}") || strings.Contains(a.Question, "agrun: agrun:") {
		t.Errorf("ask: %+v", a)
	}
	if a := f(mcp.ApprovalCall{Tool: "reader"}); a.Ask || a.Refuse != "" {
		t.Errorf("unasked: %+v", a)
	}
	if MCPApproval(config.Default(), "") != nil {
		t.Error("an approval for a config that asks about nothing")
	}
}
