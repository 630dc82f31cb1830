package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/agcore/agrun/session"
)

// sessionsCompact is `agrun sessions compact [--keep N] [--json] ID`: it
// rewrites the session file smaller (session.Files.Compact: the big tool
// results of every turn but the last N become short notes, the kept full
// copies of cut results go), atomically, and refuses a session in use.
func (c *cli) sessionsCompact(args []string) error {
	fs := newFlags("sessions compact")
	keep := fs.Int("keep", 1, "turns at the end to keep whole")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *keep < 0 {
		return usageOf(fs, "needs one session ID (and --keep at least 0)")
	}
	id := pos[0]
	st, _, done, err := c.sessionStore()
	if err != nil {
		return err
	}
	defer done()
	before, after, err := st.CompactSession(context.Background(), id, *keep)
	switch {
	case errors.Is(err, session.ErrBadID):
		return usagef("%v", err)
	case err != nil:
		return err
	}
	if *asJSON {
		writeJSONLine(c.stdout, struct {
			Session string `json:"session"`
			Before  int64  `json:"bytes_before"`
			After   int64  `json:"bytes_after"`
		}{id, before, after})
		return nil
	}
	fmt.Fprintf(c.stdout, "session %s: %d → %d bytes\n", id, before, after)
	return nil
}
