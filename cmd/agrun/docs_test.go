package main

// The one place that reads examples out of the repository's Markdown:
// sections, fenced code blocks, the command lines of ```sh blocks with
// the answers written under them, and sh-like word splitting. The tests
// that run the documents' examples (docs_*_test.go, oci_test.go,
// plugin_test.go) read the documents through these, so that a changed
// example is a changed test.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdDoc is a Markdown document of the repository, or a part of one.
type mdDoc struct {
	name string // the path from the repository's root, for messages
	text string
}

// readDoc reads the document at path (relative to the repository's root).
func readDoc(t testing.TB, path string) mdDoc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), path))
	if err != nil {
		t.Fatal(err)
	}
	return mdDoc{name: path, text: string(b)}
}

// section is the part of d under the heading line heading ("## Everyday
// use", "### POST /v1/tools — upload a tool"), up to the next heading of
// the same level or a higher one. The test fails if there is none.
func (d mdDoc) section(t testing.TB, heading string) mdDoc {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	if level < 1 || strings.Trim(heading[:level], "#") != "" {
		t.Fatalf("section %q: not a Markdown heading", heading)
	}
	_, after, ok := strings.Cut("\n"+d.text, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", d.name, heading)
	}
	next := regexp.MustCompile(`(?m)^#{1,` + fmt.Sprint(level) + `} `)
	inFence := false
	lines := strings.SplitAfter(after, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
		}
		if !inFence && next.MatchString(l) {
			after = strings.Join(lines[:i], "")
			break
		}
	}
	return mdDoc{name: d.name + " " + heading, text: after}
}

// blocks are the contents of d's fenced code blocks whose info string is
// lang ("sh", "toml", "go"; "" for those without one), in order.
func (d mdDoc) blocks(lang string) []string {
	var out []string
	var cur strings.Builder
	inFence, keep := false, false
	for _, l := range strings.SplitAfter(d.text, "\n") {
		switch {
		case !inFence && strings.HasPrefix(l, "```"):
			inFence, keep = true, strings.TrimSpace(strings.TrimPrefix(l, "```")) == lang
			cur.Reset()
		case inFence && strings.HasPrefix(l, "```"):
			if keep {
				out = append(out, cur.String())
			}
			inFence = false
		case inFence:
			cur.WriteString(l)
		}
	}
	return out
}

// shellCmd is one command line of a ```sh block.
type shellCmd struct {
	// Line is the command as sh reads it (continuation lines joined),
	// without its trailing comment.
	Line string
	// Comment is the text of its trailing "# ..." comment and of the
	// indented comment lines under it.
	Comment string
	// Want are the lines "# ..." at the start of a line right under it
	// (without "# "): the answer the document shows.
	Want []string
}

// shellCmds splits the ```sh blocks of d into commands.
func (d mdDoc) shellCmds() []shellCmd {
	var out []shellCmd
	for _, b := range d.blocks("sh") {
		out = append(out, shellCmds(b)...)
	}
	return out
}

// shellCmds splits one sh block into commands: a line ending in "\" goes
// on to the next; a line starting with "#" is an answer of the command
// above it (or, with none, a comment); an indented "#" line goes on with
// the comment of the command above it.
func shellCmds(block string) []shellCmd {
	var out []shellCmd
	var pending string
	for _, l := range strings.Split(block, "\n") {
		if pending != "" {
			l = pending + " " + strings.TrimSpace(l)
			pending = ""
		}
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "":
			continue
		case strings.HasPrefix(l, "#"):
			if len(out) > 0 {
				out[len(out)-1].Want = append(out[len(out)-1].Want, strings.TrimSpace(strings.TrimPrefix(l, "#")))
			}
			continue
		case strings.HasPrefix(trimmed, "#"):
			if len(out) > 0 {
				c := &out[len(out)-1]
				c.Comment = strings.TrimSpace(c.Comment + " " + strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			}
			continue
		}
		line, comment := cutComment(l)
		if strings.HasSuffix(line, "\\") && comment == "" {
			pending = strings.TrimSpace(strings.TrimSuffix(line, "\\"))
			continue
		}
		out = append(out, shellCmd{Line: strings.TrimSpace(line), Comment: comment})
	}
	return out
}

// cutComment splits a sh line at its comment: a "#" at the start of a
// word, outside quotes.
func cutComment(l string) (line, comment string) {
	var quote byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case quote == '"':
			if c == '\\' {
				i++
			} else if c == '"' {
				quote = 0
			}
		case c == '\\':
			i++
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return strings.TrimRight(l[:i], " \t"), strings.TrimSpace(l[i+1:])
		}
	}
	return l, ""
}

// shellWords splits a command line into words as sh does, for the
// documents' commands: '...' quoted literally, "..." with \" \\ \$ \`
// escapes, a backslash outside quotes escaping the next character.
// Variables are not expanded: a word keeps its "$X".
func shellWords(line string) []string {
	var out []string
	var w strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				w.WriteByte(c)
			}
		case quote == '"':
			switch {
			case c == '"':
				quote = 0
			case c == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0:
				i++
				w.WriteByte(line[i])
			default:
				w.WriteByte(c)
			}
		case c == ' ' || c == '\t':
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case c == '\'' || c == '"':
			quote = c
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

func TestShellCmds(t *testing.T) {
	block := "agrun call x '{\"a\":\"#1\"}'   # a comment\n" +
		"                 # more of it\n" +
		"# {\"ok\":true}\n" +
		"\n" +
		"clang -O2 \\\n  -o x.wasm x.c\n" +
		"curl -s -H 'Content-Type: application/json' -d \"{\\\"q\\\":1}\" $A url\n"
	got := shellCmds(block)
	if len(got) != 3 {
		t.Fatalf("%d commands: %q", len(got), got)
	}
	if got[0].Line != `agrun call x '{"a":"#1"}'` || got[0].Comment != "a comment more of it" || len(got[0].Want) != 1 || got[0].Want[0] != `{"ok":true}` {
		t.Errorf("first: %+v", got[0])
	}
	if got[1].Line != "clang -O2 -o x.wasm x.c" {
		t.Errorf("continued: %q", got[1].Line)
	}
	words := shellWords(got[2].Line)
	want := []string{"curl", "-s", "-H", "Content-Type: application/json", "-d", `{"q":1}`, "$A", "url"}
	if strings.Join(words, "|") != strings.Join(want, "|") {
		t.Errorf("words %q, want %q", words, want)
	}
	doc := mdDoc{name: "x.md", text: "# T\n## A\n```sh\none\n```\n```toml\n# not a heading\n```\n### A.1\ntext\n## B\n```sh\ntwo\n```\n"}
	a := doc.section(t, "## A")
	if cmds := a.shellCmds(); len(cmds) != 1 || cmds[0].Line != "one" {
		t.Errorf("section A: %+v", cmds)
	}
	if !strings.Contains(a.text, "### A.1") || strings.Contains(a.text, "two") {
		t.Errorf("section A: %q", a.text)
	}
	if b := doc.blocks("toml"); len(b) != 1 || b[0] != "# not a heading\n" {
		t.Errorf("toml blocks: %q", b)
	}
}
