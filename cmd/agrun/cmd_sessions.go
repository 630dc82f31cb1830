package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agcore/agrun/cmd/agrun/internal/session"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
)

// sessionStore opens the sessions folder of the config ([sessions] dir, else
// $XDG_DATA_HOME/agrun/sessions).
func (c *cli) sessionStore() (*session.Store, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return nil, err
	}
	dir := cfg.Sessions.Dir
	if dir == "" {
		dir = session.DefaultDir()
	}
	return session.OpenStore(dir)
}

// sessions lists saved sessions, or shows one.
func (c *cli) sessions(args []string) error {
	if len(args) > 0 && args[0] == "compact" {
		return c.sessionsCompact(args[1:])
	}
	fs := newFlags("sessions")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	st, err := c.sessionStore()
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		infos, err := st.List()
		if err != nil {
			return err
		}
		if *asJSON {
			if infos == nil {
				infos = []session.Info{}
			}
			writeJSONLine(c.stdout, infos)
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tUPDATED\tTURNS\tFIRST PROMPT")
		for _, in := range infos {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", in.ID, in.Updated.Local().Format(time.DateTime), in.Turns, safe(firstLine(in.FirstPrompt, 60)))
		}
		return tw.Flush()
	case len(pos) == 2 && pos[0] == "show":
		msgs, warnings, err := st.Load(pos[1])
		if err != nil {
			return err
		}
		for _, w := range warnings {
			fmt.Fprintf(c.stderr, "agrun: session %s: %s\n", pos[1], w)
		}
		if *asJSON {
			if msgs == nil {
				msgs = []json.RawMessage{}
			}
			writeJSONLine(c.stdout, msgs)
			return nil
		}
		for _, m := range msgs {
			printMessage(c.stdout, m)
		}
		return nil
	}
	return usagef("usage: agrun sessions [--json] | agrun sessions show [--json] ID")
}

// printMessage writes one stored message for a person to read.
func printMessage(w io.Writer, raw json.RawMessage) {
	var m loop.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		fmt.Fprintf(w, "[unreadable message: %v]\n", err)
		return
	}
	switch m.Role {
	case loop.RoleTool:
		fmt.Fprintf(w, "[tool %s %s] %s\n", safe(m.Name), m.ToolCallID, safe(textsafe.Truncate(m.Content, 400)))
	default:
		if m.Content != "" {
			fmt.Fprintf(w, "%s: %s\n", m.Role, safe(m.Content))
		}
		for _, tc := range m.ToolCalls {
			fmt.Fprintf(w, "%s: -> %s(%s) [%s]\n", m.Role, safe(tc.Name), safe(textsafe.Truncate(tc.Arguments, 200)), tc.ID)
		}
	}
}
