package session

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
)

// WriteMarkdown writes a conversation as a Markdown document (what `agrun
// sessions export` prints): a list of info's facts, then a heading per
// message, tool calls and results in fenced blocks. Text from the model
// and tools is escaped (internal/textsafe: no terminal controls, no
// invisible characters), and a fence is longer than any run of backticks
// inside it, so no content can close it.
func WriteMarkdown(w io.Writer, info Info, msgs []loop.Message) {
	esc := textsafe.Escape
	model := info.Model
	if model == "" {
		model = "-"
	}
	fmt.Fprintf(w, "# Session %s\n\n", info.ID)
	fmt.Fprintf(w, "- started: %s\n- last used: %s\n- turns: %d\n- model: %s\n- tokens: %d\n",
		info.Created.UTC().Format(time.RFC3339), info.Updated.UTC().Format(time.RFC3339), info.Turns, esc(model), info.Tokens)
	for _, m := range msgs {
		switch m.Role {
		case loop.RoleUser:
			fmt.Fprintf(w, "\n## User\n\n%s\n", esc(m.Content))
		case loop.RoleSystem:
			fmt.Fprintf(w, "\n## System\n\n%s\n", esc(m.Content))
		case loop.RoleAssistant:
			fmt.Fprintf(w, "\n## Assistant\n\n")
			if m.Content != "" {
				fmt.Fprintf(w, "%s\n", esc(m.Content))
			}
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(w, "\nCalls `%s` (%s):\n\n%s", esc(tc.Name), esc(tc.ID), fenced("json", tc.Arguments))
			}
		case loop.RoleTool:
			fmt.Fprintf(w, "\n## Tool `%s` (%s)\n\n%s", esc(m.Name), esc(m.ToolCallID), fenced("", m.Content))
		}
	}
}

var backticks = regexp.MustCompile("`{3,}")

// fenced returns s in a Markdown code block whose fence no run of
// backticks in s can close.
func fenced(lang, s string) string {
	n := 3
	for _, run := range backticks.FindAllString(s, -1) {
		n = max(n, len(run)+1)
	}
	fence := strings.Repeat("`", n)
	return fence + lang + "\n" + textsafe.Escape(strings.TrimRight(s, "\n")) + "\n" + fence + "\n"
}

// Pruned is what Prune did: the sessions it removed, and those it could
// not (in use by another process, or failing), with why.
type Pruned struct {
	Removed []Info
	Skipped map[string]error
	// Kept counts the sessions used since the cutoff.
	Kept int
}

// Prune removes the sessions last used before cutoff (PruneStore).
func (st *Files) Prune(cutoff time.Time) (Pruned, error) {
	return PruneStore(context.Background(), st, cutoff)
}
