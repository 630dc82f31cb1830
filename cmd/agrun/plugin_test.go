package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/mddoc"
)

// TestCallPluginREADME runs README's "Use Extism plug-ins" as written: its
// [tools.count_vowels] in an agrun.toml, its agrun call, its output.
func TestCallPluginREADME(t *testing.T) {
	sec := mddoc.Read(t, "README.md").Section(t, "## Use Extism plug-ins")
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
