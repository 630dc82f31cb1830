package lpriv

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// Summary is the audit of a set of recorded sessions: one Report per
// WebAssembly tool with a grant, and the calls of the tools without one.
// It is what `agrun audit --json` prints; WriteText renders it for a
// person.
type Summary struct {
	// Since is the start of the window read (zero: every record).
	Since time.Time `json:"since,omitzero"`
	// Tenant is the agrun serve tenant whose runs were read ("": the
	// sessions folder).
	Tenant string `json:"tenant,omitempty"`
	// Sessions is how many sessions were read.
	Sessions int `json:"sessions"`
	// Tools are the reports of the tools with a grant, sorted by name.
	Tools []Report `json:"tools"`
	// Other are recorded tools that have no WebAssembly grant to compare
	// with (MCP tools, tools since removed): calls only.
	Other []OtherTool `json:"other"`
	// Warnings are lines of the session files that could not be read.
	Warnings []string `json:"warnings,omitempty"`
}

// OtherTool counts the recorded calls of a tool that has no grant to
// analyse.
type OtherTool struct {
	Tool  string `json:"tool"`
	Calls int    `json:"calls"`
}

// WriteText writes s for a person: per tool its calls, each mount, host
// and limit against what the calls used, the notes, and the suggested
// block to paste into agrun.toml. Every text that came from a session
// file (a model's tool name, a guest's path or host) is cleaned, capped
// and kept on its line (textsafe.EscapeLine), so that it cannot forge a
// line of the report such as a suggested grant. s.Warnings are not
// written: they are diagnostics, for the caller to show where it shows
// those.
func (s Summary) WriteText(w io.Writer) {
	window := "every recorded call"
	if !s.Since.IsZero() {
		window = "calls since " + s.Since.Local().Format("2006-01-02 15:04")
	}
	if s.Tenant != "" {
		window = "tenant " + line(s.Tenant, 64) + "'s " + window
	}
	fmt.Fprintf(w, "# agrun audit: %s, %s\n", window, plural(s.Sessions, "session"))
	if len(s.Tools) == 0 {
		fmt.Fprintln(w, "\nNo WebAssembly tools are configured.")
	}
	for _, r := range s.Tools {
		r.writeText(w)
	}
	if len(s.Other) > 0 {
		fmt.Fprintln(w, "\nAlso recorded (no WebAssembly grant in this config to compare with):")
		unknown := 0
		for _, o := range s.Other {
			if !registry.ValidName(o.Tool) { // a model's invented name: counted, not printed
				unknown += o.Calls
				continue
			}
			fmt.Fprintf(w, "  %s: %s\n", line(o.Tool, 64), plural(o.Calls, "call"))
		}
		if unknown > 0 {
			fmt.Fprintf(w, "  (calls of names no tool can have: %d)\n", unknown)
		}
	}
}

// writeText writes one tool's part of Summary.WriteText.
func (r Report) writeText(w io.Writer) {
	fmt.Fprintf(w, "\n## %s: %s", line(r.Tool, 64), plural(r.Calls, "call"))
	if r.Calls == 0 {
		fmt.Fprintln(w, " recorded: nothing to compare its grant with (a tool never called may not be needed at all)")
		return
	}
	if r.Failed > 0 {
		fmt.Fprintf(w, " (%d failed)", r.Failed)
	}
	fmt.Fprintf(w, ", %s .. %s\n", r.First.Local().Format("2006-01-02 15:04"), r.Last.Local().Format("2006-01-02 15:04"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(r.Mounts) > 0 {
		fmt.Fprintln(tw, "  mount\tgranted\tused\tsuggest")
		for _, m := range r.Mounts {
			suggest := m.Suggest
			if suggest == "" {
				suggest = "drop"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", line(m.Guest, 256), m.Mode, m.used(), suggest)
		}
	}
	if len(r.Hosts) > 0 {
		fmt.Fprintln(tw, "  host\t\tused\tsuggest")
		for _, h := range r.Hosts {
			used, keep := "never contacted", "drop"
			if h.Keep {
				used, keep = plural(h.Requests, "request"), "keep"
			}
			fmt.Fprintf(tw, "  %s\t\t%s\t%s\n", line(h.Host, 256), used, keep)
		}
	}
	fmt.Fprintln(tw, "  limit\tgranted\tobserved max\tsuggest")
	duration := func(v int64) string { return time.Duration(v).String() }
	fmt.Fprintf(tw, "  timeout\t%s\t%s\t%s\n", time.Duration(r.Timeout.Current), time.Duration(r.Timeout.Observed).Round(time.Millisecond), r.Timeout.suggestText(duration))
	fmt.Fprintf(tw, "  memory\t%s\t%s\t%s\n", sizeText(r.Memory.Current), sizeText(r.Memory.Observed), r.Memory.suggestText(sizeText))
	fmt.Fprintf(tw, "  max_output\t%s\t%s\t%s\n", sizeText(r.Output.Current), sizeText(r.Output.Observed), r.Output.suggestText(sizeText))
	tw.Flush()
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", line(n, 1024))
	}
	fmt.Fprintf(w, "\n  suggested grant (paste over [tools.%s] in agrun.toml; keep any other keys it has):\n\n", line(r.Tool, 64))
	for _, l := range strings.Split(strings.TrimSuffix(r.TOML, "\n"), "\n") {
		fmt.Fprintf(w, "    %s\n", line(l, 4096))
	}
}

// used says how the calls used the mount.
func (m MountUse) used() string {
	var did []string
	if m.Read {
		did = append(did, "read")
	}
	if m.Wrote {
		did = append(did, "wrote")
	}
	if m.Deleted {
		did = append(did, "deleted")
	}
	if len(did) == 0 {
		return "never touched"
	}
	if m.Mode != registry.ReadOnly && !m.Wrote && !m.Deleted {
		return "only read (" + plural(m.Calls, "call") + ")"
	}
	return strings.Join(did, ", ") + " (" + plural(m.Calls, "call") + ")"
}

// suggestText is the suggested limit, shown by show, and why when it is
// not a measure of the calls.
func (l Limit) suggestText(show func(int64) string) string {
	switch {
	case l.Hit:
		return show(l.Suggest) + " (a call hit it)"
	case l.Observed == 0:
		return show(l.Suggest) + " (nothing observed)"
	}
	return show(l.Suggest)
}

// sizeText shows n bytes as agrun.toml writes sizes, rounded to a tenth
// when not whole: "64MiB", "1.5KiB", "300B".
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// line is s as one line of a report: cleaned and cut to max bytes
// (textsafe.Clean), then escaped, newlines and tabs included
// (textsafe.EscapeLine).
func line(s string, max int) string { return textsafe.EscapeLine(textsafe.Clean(s, max)) }

// plural is "1 call", "2 calls", "3 entries".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(what, "y"))
	}
	return fmt.Sprintf("%d %ss", n, what)
}
