package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/session"
)

// approvals is `agrun approvals [list|revoke]`: the standing ("always")
// approvals of the sessions folder's approvals file.
func (c *cli) approvals(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return c.approvalsList(args[1:])
		case "revoke":
			return c.approvalsRevoke(args[1:])
		}
	}
	fs := newFlags("approvals")
	asJSON := fs.Bool("json", false, "print the list as one JSON array")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		// A global flag before the subcommand (approvals -c FILE list).
		i := slices.Index(args, pos[0])
		rest := slices.Delete(slices.Clone(args), i, i+1)
		switch pos[0] {
		case "list":
			return c.approvalsList(rest)
		case "revoke":
			return c.approvalsRevoke(rest)
		}
		return usageOf(fs, "unknown subcommand %q (list, revoke)", pos[0])
	}
	return c.printApprovals(*asJSON)
}

func (c *cli) approvalsList(args []string) error {
	fs := newFlags("approvals list")
	asJSON := fs.Bool("json", false, "print the list as one JSON array")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageOf(fs, "takes no arguments")
	}
	return c.printApprovals(*asJSON)
}

func (c *cli) approvalStore() (*session.Approvals, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return nil, err
	}
	return session.OpenApprovals(setup.SessionsDir(cfg)), nil
}

// printApprovals lists the standing approvals: tool, when, by whom, and
// the grant they were given for.
func (c *cli) printApprovals(asJSON bool) error {
	st, err := c.approvalStore()
	if err != nil {
		return err
	}
	list, err := st.List()
	if err != nil {
		return err
	}
	if asJSON {
		if list == nil {
			list = []session.StandingApproval{}
		}
		writeJSONLine(c.stdout, list)
		return nil
	}
	if len(list) == 0 {
		fmt.Fprintln(c.stderr, "agrun: no standing approvals (answer [a] to an approval question to add one)")
		return nil
	}
	return session.WriteApprovals(c.stdout, list)
}

// approvalsRevoke is `agrun approvals revoke TOOL...`: each tool's
// standing approval is removed (its calls are asked about again); a tool
// without one is an error, after the others were tried.
func (c *cli) approvalsRevoke(args []string) error {
	fs := newFlags("approvals revoke")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageOf(fs, "name the tools to revoke (agrun approvals list shows them)")
	}
	st, err := c.approvalStore()
	if err != nil {
		return err
	}
	var missing []string
	for _, tool := range pos {
		ok, err := st.Revoke(tool)
		if err != nil {
			return err
		}
		if !ok {
			missing = append(missing, tool)
			continue
		}
		fmt.Fprintf(c.stdout, "revoked %s\n", setup.OneLine(tool)) // like sessions rm: what was done on stdout, diagnostics on stderr
	}
	if len(missing) > 0 {
		return fmt.Errorf("no standing approval for %s", setup.OneLine(strings.Join(missing, ", ")))
	}
	return nil
}
