package setup

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestToolInfos: one row per tool, sorted, the broken ones with why
// (worded by explain and escaped) and their kind, and never a nil
// permission list. (A tool the policy denies: cmd/agrun's TestTools*.)
func TestToolInfos(t *testing.T) {
	e, err := New(context.Background(), testConfig(t), slog.New(slog.NewTextHandler(io.Discard, nil)), nil, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var explained []string
	infos := e.ToolInfos(func(name string, err error) string {
		explained = append(explained, name)
		return "because\x1b[31m " + err.Error()
	})
	var names []string
	for _, ti := range infos {
		names = append(names, ti.Name)
		if ti.Permissions == nil {
			t.Errorf("%s: nil permissions", ti.Name)
		}
	}
	if strings.Join(names, ",") != "missing,pinned,word_count" {
		t.Fatalf("names %v, want missing,pinned,word_count", names)
	}
	for _, ti := range infos[:2] {
		if ti.Allowed || ti.Kind != "module_refused" || !strings.HasPrefix(ti.Error, `because\x1b[31m `) || !strings.HasPrefix(ti.Source, "wasm:") {
			t.Errorf("broken %s: %+v", ti.Name, ti)
		}
	}
	wc := infos[2]
	if !wc.Allowed || wc.Kind != "" || wc.Denied != "" || wc.Error != "" || !strings.HasPrefix(wc.Source, "wasm:") || !strings.HasPrefix(wc.Description, "Count the words") {
		t.Errorf("word_count: %+v", wc)
	}
	if strings.Join(explained, ",") != "missing,pinned" && strings.Join(explained, ",") != "pinned,missing" {
		t.Errorf("explain was asked about %v, want the two broken tools", explained)
	}
}

// TestWriteToolTable: one line per tool, the status says why a tool is
// broken or denied without repeating the name and file the other columns
// show, and a reason too long for the table is cut, which cut reports.
func TestWriteToolTable(t *testing.T) {
	infos := []ToolInfo{
		{Name: "ok_tool", Source: "wasm:ok.wasm", Permissions: []string{"read"}, Allowed: true, Description: "does\x1b[2J things"},
		{Name: "broken", Source: "wasm:/x/broken.wasm", Permissions: []string{}, Error: "the tool failed to load: open /x/broken.wasm: no such file or directory ([tools.broken] wasm)"},
		{Name: "denied", Source: "mcp:fs", Permissions: []string{"write"}, Denied: "write is not in [permissions] allowed"},
		{Name: "warned", Source: "wasm:w.wasm", Permissions: []string{}, Allowed: true, Warnings: []string{"[tools.warned] mounts has no effect"}},
	}
	var b strings.Builder
	cut, err := WriteToolTable(&b, infos)
	if err != nil || cut {
		t.Fatalf("cut %v, err %v", cut, err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		f := strings.Fields(l)
		rows[f[0]] = strings.Join(f, " ")
	}
	for name, want := range map[string]string{
		"NAME":    "NAME SOURCE PERMISSIONS STATUS DESCRIPTION",
		"ok_tool": `ok_tool wasm:ok.wasm read ok does\x1b[2J things`,
		"broken":  "broken wasm:/x/broken.wasm - broken: no such file or directory ([tools.broken] wasm)",
		"denied":  "denied mcp:fs write denied: write is not in [permissions] allowed",
		"warned":  "warned wasm:w.wasm - ok; warning: [tools.warned] mounts has no effect",
	} {
		if rows[name] != want {
			t.Errorf("row %s = %q, want %q", name, rows[name], want)
		}
	}
	b.Reset()
	infos[1].Error += strings.Repeat(" and more", 20)
	if cut, _ := WriteToolTable(&b, infos); !cut {
		t.Errorf("a long reason was not reported cut:\n%s", b.String())
	}
}
