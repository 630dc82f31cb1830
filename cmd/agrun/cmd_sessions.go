package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
)

// sessionStore opens the store `agrun sessions` works on
// (setup.SessionAdmin): the sessions folder of the config, or the
// cluster's PostgreSQL; where names it.
func (c *cli) sessionStore() (st session.Admin, where string, close func(), err error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return nil, "", nil, err
	}
	return setup.SessionAdmin(context.Background(), cfg, c.logger())
}

// sessionCommands are the subcommands of `agrun sessions`, by name; each
// gets its arguments after the name, and has its help under
// "sessions NAME" in cmdDocs.
var sessionCommands = map[string]func(c *cli, args []string) error{
	"show":    (*cli).sessionsShow,
	"rm":      (*cli).sessionsRm,
	"export":  (*cli).sessionsExport,
	"prune":   (*cli).sessionsPrune,
	"compact": (*cli).sessionsCompact,
}

// sessions is `agrun sessions [--json]` (the list) or `agrun sessions SUB
// ...`. A subcommand may follow the list's flags (`sessions --json show
// ID`, as older versions took it).
func (c *cli) sessions(args []string) error {
	if len(args) > 0 {
		if sub, ok := sessionCommands[args[0]]; ok {
			return sub(c, args[1:])
		}
	}
	fs := newFlags("sessions")
	asJSON := fs.Bool("json", false, "print the list as one JSON array")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		sub, ok := sessionCommands[pos[0]]
		if !ok {
			return usageOf(fs, "unknown subcommand %q", pos[0])
		}
		i := slices.Index(args, pos[0])
		return sub(c, slices.Delete(slices.Clone(args), i, i+1))
	}
	st, where, done, err := c.sessionStore()
	if err != nil {
		return err
	}
	defer done()
	infos, err := st.Summaries(context.Background())
	if err != nil {
		return err
	}
	return c.printSessionList(infos, *asJSON, where)
}

// printSessionList prints the list of `agrun sessions`; where names the
// store in the message about an empty one.
func (c *cli) printSessionList(infos []session.Info, asJSON bool, where string) error {
	if asJSON {
		if infos == nil {
			infos = []session.Info{}
		}
		writeJSONLine(c.stdout, infos)
		return nil
	}
	if len(infos) == 0 {
		fmt.Fprintf(c.stderr, "agrun: no saved sessions in %s\n", where)
		return nil
	}
	return session.WriteList(c.stdout, infos)
}

// sessionErr turns the session package's errors into the CLI's: a bad id
// is a usage error (exit 2).
func sessionErr(err error) error {
	if errors.Is(err, session.ErrBadID) {
		return usagef("%v", err)
	}
	return err
}

// oneID parses a subcommand that takes exactly one session id.
func (c *cli) oneID(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", usageOf(fs, "needs one session ID")
	}
	if !session.ValidID(pos[0]) {
		return "", usageOf(fs, "%q: %v", pos[0], session.ErrBadID)
	}
	return pos[0], nil
}

// sessionsShow is `agrun sessions show [--json] ID`: the conversation for
// a person, or its raw records (messages and requests) as one JSON array.
func (c *cli) sessionsShow(args []string) error {
	fs := newFlags("sessions show")
	asJSON := fs.Bool("json", false, "print the raw records (messages, requests and tool calls) as one JSON array")
	id, err := c.oneID(fs, args)
	if err != nil {
		return err
	}
	st, _, done, err := c.sessionStore()
	if err != nil {
		return err
	}
	defer done()
	ctx := context.Background()
	recs, warnings, err := session.RecordsOf(ctx, st, id)
	if err != nil {
		return sessionErr(err)
	}
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "agrun: session %s: %s\n", id, w)
	}
	if *asJSON {
		if recs == nil {
			recs = []session.Record{}
		}
		writeJSONLine(c.stdout, recs)
		return nil
	}
	if info, err := st.Summary(ctx, id); err == nil {
		fmt.Fprintf(c.stdout, "# session %s: %d turns, model %s, %d tokens, last used %s\n", id, info.Turns,
			safe(orDash(info.Model)), info.Tokens, info.Updated.Local().Format(time.DateTime))
	}
	session.WriteTranscript(c.stdout, recs)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sessionsRm is `agrun sessions rm ID...`. Each id is removed or says why
// not (in use, not found); any failure exits 1 once all were tried.
func (c *cli) sessionsRm(args []string) error {
	fs := newFlags("sessions rm")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageOf(fs, "needs at least one session ID")
	}
	for _, id := range pos {
		if !session.ValidID(id) {
			return usageOf(fs, "%q: %v", id, session.ErrBadID)
		}
	}
	st, _, done, err := c.sessionStore()
	if err != nil {
		return err
	}
	defer done()
	failed := 0
	for _, id := range pos {
		if _, err := st.RemoveSession(context.Background(), id, time.Time{}); err != nil {
			failed++
			fmt.Fprintf(c.stderr, "agrun: %s\n", rmError(id, err))
			continue
		}
		fmt.Fprintf(c.stdout, "removed %s\n", id)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d sessions not removed", failed, len(pos))
	}
	return nil
}

// rmError says why session id was not removed.
func rmError(id string, err error) string {
	switch {
	case errors.Is(err, session.ErrLocked):
		return fmt.Sprintf("session %s is in use by another agrun process: not removed", id)
	case errors.Is(err, session.ErrNotFound):
		return fmt.Sprintf("session %s not found", id)
	}
	return err.Error()
}

// sessionsExport is `agrun sessions export [--format json|markdown] ID`.
func (c *cli) sessionsExport(args []string) error {
	fs := newFlags("sessions export")
	format := fs.String("format", "markdown", "`FORMAT` of the export: markdown or json")
	id, err := c.oneID(fs, args)
	if err != nil {
		return err
	}
	if *format != "markdown" && *format != "json" {
		return usageOf(fs, "--format %q: want markdown or json", *format)
	}
	st, _, done, err := c.sessionStore()
	if err != nil {
		return err
	}
	defer done()
	info, msgs, warnings, err := session.ExportOf(context.Background(), st, id)
	if err != nil {
		return sessionErr(err)
	}
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "agrun: session %s: %s\n", id, w)
	}
	if *format == "json" {
		writeJSONLine(c.stdout, struct {
			session.Info
			History []loop.Message `json:"history"`
		}{info, msgs})
		return nil
	}
	session.WriteMarkdown(c.stdout, info, msgs)
	return nil
}

// sessionsPrune is `agrun sessions prune --older-than AGE`.
func (c *cli) sessionsPrune(args []string) error {
	fs := newFlags("sessions prune")
	olderThan := fs.String("older-than", "", "remove the sessions last used more than `AGE` ago: 30d, 12h, 90m (required)")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments")
	}
	if *olderThan == "" {
		return usageOf(fs, "needs --older-than AGE")
	}
	age, err := config.ParseAge(*olderThan)
	if err != nil {
		return usageOf(fs, "--older-than: %v", err)
	}
	st, _, done, err := c.sessionStore()
	if err != nil {
		return err
	}
	defer done()
	p, err := session.PruneStore(context.Background(), st, time.Now().Add(-age))
	if err != nil {
		return err
	}
	for _, in := range p.Removed {
		fmt.Fprintf(c.stdout, "removed %s (last used %s)\n", in.ID, in.Updated.Local().Format(time.DateTime))
	}
	for _, id := range sortedKeys(p.Skipped) {
		fmt.Fprintf(c.stderr, "agrun: %s\n", rmError(id, p.Skipped[id]))
	}
	fmt.Fprintf(c.stderr, "agrun: %d sessions removed, %d kept (used within %s)", len(p.Removed), p.Kept, *olderThan)
	if len(p.Skipped) > 0 {
		fmt.Fprintf(c.stderr, ", %d in use skipped", len(p.Skipped))
	}
	fmt.Fprintln(c.stderr)
	return nil
}
