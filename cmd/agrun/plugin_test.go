package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/mddoc"
)

// TestCallPluginREADME runs README's "Use Extism and hyper-mcp plug-ins" as written: its
// [tools.count_vowels] in an agrun.toml, its agrun call, its output.
func TestCallPluginREADME(t *testing.T) {
	t.Parallel()
	sec := mddoc.Read(t, "README.md").Section(t, "## Use Extism and hyper-mcp plug-ins")
	tomls, shs := sec.Blocks("toml"), sec.Blocks("sh")
	if len(tomls) == 0 || len(shs) == 0 {
		t.Fatalf("%s: want a toml and an sh block", sec.Name)
	}
	block := tomls[0]
	block = strings.Replace(block, `"testdata/plugins/count_vowels.wasm"`, `"`+filepath.Join(repoRoot(t), "testdata/plugins/count_vowels.wasm")+`"`, 1)
	e := newTestEnv(t, "", "\n"+block)
	cmd := regexp.MustCompile(`(?m)^agrun call (\S+) '([^']*)'\n# (.*)$`).FindStringSubmatch(shs[0])
	if cmd == nil {
		t.Fatal("no `agrun call NAME 'ARGS'` and its output in the README's sh block")
	}
	r := e.run("", "call", cmd[1], cmd[2]).wantCode(t, exitOK)
	if r.stdout != cmd[3]+"\n" {
		t.Fatalf("stdout %q, README says %q (stderr %q)", r.stdout, cmd[3], r.stderr)
	}
	// A second call sees no var of the first.
	if r := e.run("", "call", cmd[1], cmd[2]).wantCode(t, exitOK); r.stdout != cmd[3]+"\n" {
		t.Fatalf("second call: %q", r.stdout)
	}
	// Its extism:host/env calls count in the audit's host_calls
	// (docs/OBSERVABILITY.md).
	r = e.run("", "call", "--json", "--audit", cmd[1], cmd[2]).wantCode(t, exitOK)
	var got struct {
		Audit struct {
			HostCalls int `json:"host_calls"`
		} `json:"audit"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Audit.HostCalls == 0 {
		t.Fatalf("a plug-in's audit counts no host calls (%v): %s", err, r.stdout)
	}
	r = e.run("", "tools").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "count_vowels") {
		t.Fatalf("tools: %q", r.stdout)
	}
	// The schema from [tools.count_vowels] parameters is enforced.
	r = e.run("", "call", "count_vowels", `{"txt":"a"}`).wantCode(t, exitUsage) // the command line's arguments
	if !strings.Contains(r.stderr, "invalid_arguments") {
		t.Fatalf("schema: %+v", r)
	}
}

func TestCallPluginConfig(t *testing.T) {
	t.Parallel()
	wasm := filepath.Join(repoRoot(t), "testdata/plugins/count_vowels.wasm")
	t.Run("error_set", func(t *testing.T) {
		e := newTestEnv(t, "", `
[tools.fail]
wasm = "`+wasm+`"
description = "always fails"
`)
		r := e.run("", "call", "--json", "fail", `{}`).wantCode(t, exitFailure)
		if !strings.Contains(r.stdout, `"kind":"execution_failed"`) || !strings.Contains(r.stdout, `no luck: {}`) {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("no description", func(t *testing.T) {
		e := newTestEnv(t, "", `
[tools.count_vowels]
wasm = "`+wasm+`"
`)
		r := e.run("", "call", "count_vowels", `{}`).wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, "module_refused") || !strings.Contains(r.stderr, "[tools.count_vowels] description") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("manifest and plug-in keys", func(t *testing.T) {
		e := newTestEnv(t, "", `
[tools.count_vowels]
wasm = "`+wasm+`"
manifest = "x.toml"
function = "count_vowels"
`)
		r := e.run("", "tools").wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, `"function" is for an Extism plug-in`) {
			t.Fatalf("%+v", r)
		}
	})
}

// TestCallPluginFile: `agrun call FILE.wasm` of a plug-in says where its
// description goes (a plug-in has no manifest for the flags to use).
func TestCallPluginFile(t *testing.T) {
	t.Parallel()
	r := runIn(t, "", "call", filepath.Join(repoRoot(t), "testdata/plugins/count_vowels.wasm"), `{}`).wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "Extism plug-in") || !strings.Contains(r.stderr, "[tools.NAME]") {
		t.Fatalf("%+v", r)
	}
}

// TestMCPPluginREADME runs README's MCP-style plug-in example as written
// (its second toml and sh blocks), then end to end: the plug-in's two
// tools in `agrun tools`, called by `agrun call` and by a model through
// `agrun run` (its approve = "ask" denying them without a terminal, then,
// with the line removed, running them), and in `agrun audit`, where the
// [plugins.kit] grant is compared with the calls of all its tools.
func TestMCPPluginREADME(t *testing.T) {
	t.Parallel()
	sec := mddoc.Read(t, "README.md").Section(t, "## Use Extism and hyper-mcp plug-ins")
	tomls, shs := sec.Blocks("toml"), sec.Blocks("sh")
	if len(tomls) < 2 || len(shs) < 2 {
		t.Fatalf("%s: want a second toml and sh block (the MCP-style plug-in)", sec.Name)
	}
	block := strings.Replace(tomls[1], `"testdata/plugins/textkit.wasm"`, `"`+filepath.Join(repoRoot(t), "testdata/plugins/textkit.wasm")+`"`, 1)
	srv := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{
			{ID: "call_s", Name: "kit__stats", Args: `{"text":"two words"}`},
			{ID: "call_r", Name: "kit__reverse", Args: `{"text":"stressed"}`},
		}},
		chattest.Reply{Text: "Not allowed."},
		chattest.Reply{ToolCalls: []chattest.Call{
			{ID: "call_s", Name: "kit__stats", Args: `{"text":"two words"}`},
			{ID: "call_r", Name: "kit__reverse", Args: `{"text":"stressed"}`},
		}},
		chattest.Reply{Text: "2 words; desserts."},
	)
	e := newTestEnv(t, srv.URL, "\n"+block)

	r := e.run("", "tools", "--json").wantCode(t, exitOK)
	for _, name := range []string{`"name":"kit__reverse"`, `"name":"kit__stats"`} {
		if !strings.Contains(r.stdout, name) {
			t.Fatalf("tools --json lacks %s: %s", name, r.stdout)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^agrun call (\S+) '([^']*)'\n# (.*)$`).FindAllStringSubmatch(shs[1], -1) {
		if r := e.run("", "call", m[1], m[2]).wantCode(t, exitOK); r.stdout != m[3]+"\n" {
			t.Fatalf("call %s: stdout %q, README says %q (stderr %q)", m[1], r.stdout, m[3], r.stderr)
		}
	}
	if r := e.run("", "call", "--json", "kit__stats", `{"text":""}`).wantCode(t, exitFailure); !strings.Contains(r.stdout, `"kind":"execution_failed"`) || !strings.Contains(r.stdout, "text is empty") {
		t.Fatalf("isError: %+v", r)
	}

	// approve = "ask", no terminal: both calls are denied, not run.
	e.run("", "run", "-s", "p1", "stats and reverse").wantCode(t, exitOK)
	if m := toolMessage(t, srv, 1, "call_s"); !strings.Contains(m, "denied") {
		t.Fatalf("with approve = ask and no terminal, the model got %q", m)
	}
	e.edit(`approve = "ask"`, "")
	e.run("", "run", "-s", "p2", "stats and reverse").wantCode(t, exitOK)
	if m := toolMessage(t, srv, 3, "call_s"); m != `{"runes":9,"words":2}` {
		t.Fatalf("kit__stats gave the model %q", m)
	}
	if m := toolMessage(t, srv, 3, "call_r"); m != `"desserts"` {
		t.Fatalf("kit__reverse gave the model %q", m)
	}

	r = e.run("", "audit", "--json").wantCode(t, exitOK)
	var rep struct {
		Tools []struct {
			Tool   string `json:"tool"`
			Calls  int    `json:"calls"`
			Failed int    `json:"failed"`
			TOML   string `json:"toml"`
		} `json:"tools"`
		Other []struct {
			Tool string `json:"tool"`
		} `json:"other"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tr := range rep.Tools {
		if tr.Tool == "kit" {
			found = true
			if tr.Calls != 4 || tr.Failed != 2 || !strings.HasPrefix(tr.TOML, "[plugins.kit]\n") {
				t.Errorf("audit of [plugins.kit]: %d calls (%d failed), block %q; want the 4 calls of its tools (the 2 denied failed) and a [plugins.kit] block", tr.Calls, tr.Failed, tr.TOML)
			}
		}
	}
	if !found || len(rep.Other) != 0 {
		t.Errorf("audit: tools %+v, other %+v; want kit among the tools and no other", rep.Tools, rep.Other)
	}
}

// TestMCPPluginConfig: what [plugins.NAME] refuses, and a plug-in that
// fails to load shows as NAME__* with the reason.
func TestMCPPluginConfig(t *testing.T) {
	t.Parallel()
	textkit := filepath.Join(repoRoot(t), "testdata/plugins/textkit.wasm")
	for _, c := range []struct{ extra, want string }{
		{"[plugins.kit]\nwasm = %q\ndescription = \"x\"\n", `plugins.kit.description: a plug-in's tools are described by its own list`},
		{"[plugins.kit]\nwasm = %q\nfunction = \"x\"\n", `plugins.kit.function:`},
		{"[plugins.a__b]\nwasm = %q\n", `may not contain "__"`},
		{"[plugins.kit]\nwasm = %q\napprove = \"maybe\"\n", `plugins.kit.approve: must be`},
		{"[plugins.kit]\nwasm = %q\n[mcp.kit]\ncommand = \"x\"\n", `[mcp.kit] has the same name`},
	} {
		e := newTestEnv(t, "", "\n"+fmt.Sprintf(c.extra, textkit))
		r := e.run("", "tools").wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: stderr %q, want %q", c.extra, r.stderr, c.want)
		}
	}
	e := newTestEnv(t, "", "\n[plugins.cv]\nwasm = "+fmt.Sprintf("%q", filepath.Join(repoRoot(t), "testdata/plugins/count_vowels.wasm"))+"\n")
	r := e.run("", "tools", "--json").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"name":"cv__*"`) || !strings.Contains(r.stdout, "neither list_tools and call_tool") {
		t.Fatalf("a plain plug-in as [plugins.cv]: %s", r.stdout)
	}
	if r := e.run("", "call", "cv__x", `{}`); r.code == exitOK || !strings.Contains(r.stderr+r.stdout, "module_refused") {
		t.Fatalf("calling a tool of a plug-in that failed to load: %+v", r)
	}
}

// TestPluginsConfigExample: docs/CONFIG.md's [plugins.kit] example loads
// as written (its wasm path as from the repository's root): its tools
// are listed, granted the network the example's allowed_hosts implies,
// and ask before they run.
func TestPluginsConfigExample(t *testing.T) {
	t.Parallel()
	var block string
	for _, b := range mddoc.Read(t, "docs/CONFIG.md").Section(t, "## [plugins.NAME] — an MCP-style plug-in; its tools are `NAME__tool`").Blocks("toml") {
		if strings.HasPrefix(b, "[plugins.kit]") {
			block = b
		}
	}
	if block == "" {
		t.Fatal("docs/CONFIG.md has no [plugins.kit] example")
	}
	block = strings.Replace(block, `"testdata/plugins/textkit.wasm"`, quote(filepath.Join(repoRoot(t), "testdata/plugins/textkit.wasm")), 1)
	e := newTestEnv(t, "", "\n"+block)
	r := e.run("", "tools", "--json").wantCode(t, exitOK)
	var tools []struct {
		Name        string   `json:"name"`
		Permissions []string `json:"permissions"`
		Warnings    []string `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &tools); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tl := range tools {
		if strings.HasPrefix(tl.Name, "kit__") {
			n++
			if strings.Join(tl.Permissions, ",") != "network" || len(tl.Warnings) != 0 {
				t.Errorf("%s: permissions %v, warnings %v; want network (implied by allowed_hosts) and no warning", tl.Name, tl.Permissions, tl.Warnings)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d kit__ tools, want 2: %s", n, r.stdout)
	}
}
