package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/session"
)

// audit is `agrun audit [--tenant NAME] [--session ID] [--tool NAME]
// [--since AGE] [--json]`: the call records of the saved sessions (what each tool call
// did, as the sandbox saw it) against each configured WebAssembly tool's
// grant, and the smaller grant that would have let every recorded call do
// what it did (setup.Audit, package lpriv).
//
// It reads only call records, which `agrun run`, `agrun chat` and agrun
// serve's runs write; a grant is only as well measured as the calls
// recorded, which the report says (calls, first and last). With
// --tenant it reads the sessions of that agrun serve tenant's runs, in
// [serve] data_dir, and only the records of that tenant.
func (c *cli) audit(ctx context.Context, args []string) error {
	fs := newFlags("audit")
	sessionID := fs.String("session", "", "read only session `ID`")
	tool := fs.String("tool", "", "report only the tool `NAME`")
	since := fs.String("since", "", "read only the calls of the last `AGE`: 7d, 12h, 90m (default: every recorded call)")
	tenant := fs.String("tenant", "", "read the runs of agrun serve tenant `NAME` (in [serve] data_dir) instead of the [sessions] folder")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments (--session ID, --tool NAME, --tenant NAME)")
	}
	var from time.Time
	if *since != "" {
		age, err := config.ParseAge(*since)
		if err != nil {
			return usageOf(fs, "--since: %v", err)
		}
		from = time.Now().Add(-age)
	}
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	if *tool != "" {
		if _, ok := cfg.Tools[*tool]; !ok {
			return usageOf(fs, "--tool: no WebAssembly tool %q in the config (`agrun tools` lists them; the audit compares a [tools.NAME] grant with its calls)", safe(*tool))
		}
	}
	var st *session.Files
	if *tenant != "" {
		if st, err = setup.TenantSessions(cfg, *tenant); err != nil {
			return usageOf(fs, "--tenant: %v", err)
		}
	} else if st, err = c.sessionStoreFor(cfg); err != nil {
		return err
	}
	rep, err := setup.Audit(cfg, st, setup.AuditQuery{Session: *sessionID, Tool: *tool, Tenant: *tenant, Since: from})
	if errors.Is(err, session.ErrBadID) {
		return usageOf(fs, "%v", err)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		writeJSONLine(c.stdout, rep)
		return nil
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(c.stderr, "agrun: %s\n", setup.OneLine(textsafe.Clean(w, 512)))
	}
	rep.WriteText(c.stdout)
	return nil
}

// sortedKeys is the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
