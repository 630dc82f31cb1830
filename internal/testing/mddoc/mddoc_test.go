package mddoc_test

import (
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/mddoc"
)

func TestShellCmds(t *testing.T) {
	block := "agrun call x '{\"a\":\"#1\"}'   # a comment\n" +
		"                 # more of it\n" +
		"# {\"ok\":true}\n" +
		"\n" +
		"clang -O2 \\\n  -o x.wasm x.c\n" +
		"curl -s -H 'Content-Type: application/json' -d \"{\\\"q\\\":1}\" $A url\n"
	got := mddoc.ShellCmds(block)
	if len(got) != 3 {
		t.Fatalf("%d commands: %q", len(got), got)
	}
	if got[0].Line != `agrun call x '{"a":"#1"}'` || got[0].Comment != "a comment more of it" || len(got[0].Want) != 1 || got[0].Want[0] != `{"ok":true}` {
		t.Errorf("first: %+v", got[0])
	}
	if got[1].Line != "clang -O2 -o x.wasm x.c" {
		t.Errorf("continued: %q", got[1].Line)
	}
	words := mddoc.ShellWords(got[2].Line)
	want := []string{"curl", "-s", "-H", "Content-Type: application/json", "-d", `{"q":1}`, "$A", "url"}
	if strings.Join(words, "|") != strings.Join(want, "|") {
		t.Errorf("words %q, want %q", words, want)
	}
	doc := mddoc.Doc{Name: "x.md", Text: "# T\n## A\n```sh\none\n```\n```toml\n# not a heading\n```\n### A.1\ntext\n## B\n```sh\ntwo\n```\n"}
	a := doc.Section(t, "## A")
	if cmds := a.ShellCmds(); len(cmds) != 1 || cmds[0].Line != "one" {
		t.Errorf("section A: %+v", cmds)
	}
	if !strings.Contains(a.Text, "### A.1") || strings.Contains(a.Text, "two") {
		t.Errorf("section A: %q", a.Text)
	}
	if b := doc.Blocks("toml"); len(b) != 1 || b[0] != "# not a heading\n" {
		t.Errorf("toml blocks: %q", b)
	}
}
