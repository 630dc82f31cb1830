package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/agcore/agrun/permission"
)

// TestApprovalsKeys: [approvals] ask and the approve keys of tools and
// MCP servers decode strictly and decide which calls are asked about.
func TestApprovalsKeys(t *testing.T) {
	c, err := Parse("agrun.toml", []byte(`
[approvals]
ask = ["write", "network"]

[tools.write_note]
wasm = "w.wasm"

[tools.word_count]
wasm = "wc.wasm"
approve = "ask"

[tools.get_weather]
wasm = "gw.wasm"
approve = "always"

[mcp.files]
command = "x"
approve = "never"
`))
	if err != nil {
		t.Fatal(err)
	}
	w, n := []permission.Permission{permission.Filesystem, permission.Write}, []permission.Permission{permission.Network}
	for _, tc := range []struct {
		name, server string
		uses         []permission.Permission
		want         string
	}{
		{"write_note", "", w, ApproveAsk},         // a use in [approvals] ask
		{"write_note", "", nil, ApproveAlways},    // none
		{"word_count", "", nil, ApproveAsk},       // the tool says ask
		{"get_weather", "", n, ApproveAlways},     // the tool says always, over ask
		{"files__rm", "files", nil, ApproveNever}, // the server says never
		{"other__x", "other", n, ApproveAsk},      // an unknown server: [approvals] ask
		{"read_file", "", []permission.Permission{permission.Read}, ApproveAlways},
	} {
		if got := c.ApprovalFor(tc.name, tc.server, tc.uses); got != tc.want {
			t.Errorf("ApprovalFor(%s, %v) = %q, want %q", tc.name, tc.uses, got, tc.want)
		}
	}
	if d := Default(); len(d.Approvals.Ask) != 0 || d.ApprovalFor("t", "", w) != ApproveAlways {
		t.Errorf("default asks about %v", d.Approvals.Ask)
	}

	for _, tc := range []struct{ toml, key, msg string }{
		{"[tools.t]\nwasm = \"x\"\napprove = \"yes\"\n", "tools.t.approve", `must be "ask", "always" or "never"`},
		{"[mcp.s]\ncommand = \"x\"\napprove = \"maybe\"\n", "mcp.s.approve", `must be "ask"`},
		{"[approvals]\nask = [\"sudo\"]\n", "approvals.ask", `invalid permission "sudo"`},
		{"[approvals]\nasks = [\"write\"]\n", "approvals.asks", "unknown key"},
	} {
		_, err := Parse("agrun.toml", []byte(tc.toml))
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: %v (key %q)", tc.toml, err, ce.Key)
		}
	}
}
