package lpriv

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/registry"
)

// TestSummaryWriteText: the report for a person shows each mount, host
// and limit against what the calls used and the block to paste, and text
// from a session file stays on its line.
func TestSummaryWriteText(t *testing.T) {
	local := time.Local
	time.Local = time.UTC
	t.Cleanup(func() { time.Local = local })
	rep := Analyze("notes", wasm, grant(), calls())
	rep.Notes = append(rep.Notes, "forged\n[tools.notes]\nmounts = [\"/:/:rwd\"]")
	s := Summary{Since: t0.Add(-time.Hour), Tenant: "acme", Sessions: 1, Tools: []Report{rep},
		Other: []OtherTool{{Tool: "fs__read", Calls: 2}, {Tool: "no such\ntool", Calls: 1}}}
	var b strings.Builder
	s.WriteText(&b)
	got := b.String()
	var cells []string // each line's cells, one space apart: the table's widths are tabwriter's
	for _, l := range strings.Split(got, "\n") {
		cells = append(cells, strings.Join(strings.Fields(l), " "))
	}
	table := strings.Join(cells, "\n")
	for _, want := range []string{
		"/docs rw only read (2 calls) ro",
		"/notes rwd read, wrote (1 call) rw",
		"/tmp rwd never touched drop",
		"api.example.com 1 request keep",
		"unused.example.com never contacted drop",
		"timeout 10s 300ms 1s",
		"memory 64MiB 7MiB 11MiB",
		"max_output 1MiB 900B 64KiB",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the report's table lacks %q:\n%s", want, got)
		}
	}
	for _, want := range []string{
		"# agrun audit: tenant acme's calls since 2026-12-01 09:00, 1 session\n",
		"## notes: 3 calls (1 failed), 2026-12-01 10:00 .. 2026-12-01 12:00\n",
		`  note: forged\n[tools.notes]\nmounts = ["/:/:rwd"]`,
		"  suggested grant (paste over [tools.notes] in agrun.toml",
		"    [tools.notes]\n",
		"  fs__read: 2 calls\n",
		"  (calls of names no tool can have: 1)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "mounts = ") || strings.Contains(l, "no such") {
			t.Errorf("text from the record started a line of its own: %q", l)
		}
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 300: "300B", 1 << 10: "1KiB", 1536: "1.5KiB", 64 << 20: "64MiB", 3 << 19: "1.5MiB"} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
}

// A tool never called, and the calls of tools without a grant (an MCP
// server's, a name a model made up).
func ExampleSummary_WriteText() {
	g := registry.Grant{Source: "wasm", Mounts: []registry.GrantMount{{Host: "./docs", Guest: "/docs", Mode: registry.ReadOnly}}}
	s := Summary{
		Sessions: 2,
		Tools:    []Report{Analyze("read_file", "tools/read_file.wasm", g, nil)},
		Other:    []OtherTool{{Tool: "fs__search", Calls: 3}, {Tool: "made up!", Calls: 1}},
	}
	s.WriteText(os.Stdout)
	// Output:
	// # agrun audit: every recorded call, 2 sessions
	//
	// ## read_file: 0 calls recorded: nothing to compare its grant with (a tool never called may not be needed at all)
	//
	// Also recorded (no WebAssembly grant in this config to compare with):
	//   fs__search: 3 calls
	//   (calls of names no tool can have: 1)
}
