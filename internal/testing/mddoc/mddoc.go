// Package mddoc reads the examples out of the repository's Markdown, for
// the tests that run them (a changed example is a changed test): a
// document's sections, its fenced code blocks, the command lines of its
// ```sh blocks with the answers written under them, and sh-like word
// splitting.
//
//	doc := mddoc.Read(t, "docs/API.md")
//	for _, c := range doc.Section(t, "## Endpoints").ShellCmds() {
//		words := mddoc.ShellWords(c.Line) // run it; compare with c.Want
//	}
//
// Everything here is safe for concurrent use: a Doc is a value.
package mddoc

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Root is the repository's root: the folder holding go.mod at or above
// the test's working directory.
func Root(t testing.TB) string {
	t.Helper()
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatal("mddoc: no go.mod above the working directory")
		}
	}
}

// Doc is a Markdown document of the repository, or a part of one.
type Doc struct {
	Name string // the path from the repository's root, for messages
	Text string
}

// Read reads the document at path (relative to the repository's root).
func Read(t testing.TB, path string) Doc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), path))
	if err != nil {
		t.Fatal(err)
	}
	return Doc{Name: path, Text: string(b)}
}

// Section is the part of d under the heading line heading ("## Everyday
// use", "### POST /v1/tools — upload a tool"), up to the next heading of
// the same level or a higher one. The test fails if there is none.
func (d Doc) Section(t testing.TB, heading string) Doc {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	if level < 1 || strings.Trim(heading[:level], "#") != "" {
		t.Fatalf("section %q: not a Markdown heading", heading)
	}
	_, after, ok := strings.Cut("\n"+d.Text, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", d.Name, heading)
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
	return Doc{Name: d.Name + " " + heading, Text: after}
}

// Blocks are the contents of d's fenced code blocks whose info string is
// lang ("sh", "toml", "go"; "" for those without one), in order.
func (d Doc) Blocks(lang string) []string {
	var out []string
	var cur strings.Builder
	inFence, keep := false, false
	for _, l := range strings.SplitAfter(d.Text, "\n") {
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

// ShellCmd is one command line of a ```sh block.
type ShellCmd struct {
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

// ShellCmds splits the ```sh blocks of d into commands.
func (d Doc) ShellCmds() []ShellCmd {
	var out []ShellCmd
	for _, b := range d.Blocks("sh") {
		out = append(out, ShellCmds(b)...)
	}
	return out
}

// ShellCmds splits one sh block into commands: a line ending in "\" goes
// on to the next; a line starting with "#" is an answer of the command
// above it (or, with none, a comment); an indented "#" line goes on with
// the comment of the command above it.
func ShellCmds(block string) []ShellCmd {
	var out []ShellCmd
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
		line, comment := CutComment(l)
		if strings.HasSuffix(line, "\\") && comment == "" {
			pending = strings.TrimSpace(strings.TrimSuffix(line, "\\"))
			continue
		}
		out = append(out, ShellCmd{Line: strings.TrimSpace(line), Comment: comment})
	}
	return out
}

// CutComment splits a sh line at its comment: a "#" at the start of a
// word, outside quotes.
func CutComment(l string) (line, comment string) {
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

// ShellWords splits a command line into words as sh does, for the
// documents' commands: '...' quoted literally, "..." with \" \\ \$ \`
// escapes, a backslash outside quotes escaping the next character.
// Variables are not expanded: a word keeps its "$X".
func ShellWords(line string) []string {
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
