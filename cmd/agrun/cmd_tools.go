package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/agcore/agrun/cmd/agrun/internal/server"
	"github.com/agcore/agrun/cmd/agrun/internal/termsafe"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// call runs one tool through the registry, without a model. With --json it
// prints exactly one object on stdout for every outcome.
func (c *cli) call(ctx context.Context, args []string) int {
	fs := newFlags("call")
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, err := parseFlags(fs, args)
	if isHelp(err) {
		return c.exit(err)
	}
	if err == nil && (len(pos) < 1 || len(pos) > 2) {
		err = usagef("usage: agrun call [--json] NAME [ARGS_JSON]")
	}
	var out json.RawMessage
	if err == nil {
		out, err = c.callTool(ctx, pos)
	}
	if *asJSON {
		writeJSONLine(c.stdout, callResult(out, err))
		c.usageHint(err)
		switch {
		case err == nil:
			return exitOK
		case isUsage(err):
			return exitUsage
		}
		return exitFailure
	}
	if err != nil {
		return c.exit(err)
	}
	fmt.Fprintf(c.stdout, "%s\n", termsafe.JSON(out))
	return exitOK
}

func (c *cli) callTool(ctx context.Context, pos []string) (json.RawMessage, error) {
	name := pos[0]
	var args []byte
	if len(pos) == 2 {
		args = []byte(pos[1])
	} else {
		var err error
		if args, err = io.ReadAll(io.LimitReader(c.stdin, registry.DefaultMaxArgsBytes+1)); err != nil {
			return nil, fmt.Errorf("reading arguments from stdin: %w", err)
		}
	}
	e, err := c.openEnv(ctx, only(name), false)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if berr := e.brokenFor(name); berr != nil {
		msg := berr.Error()
		var re *registry.Error
		if errors.As(berr, &re) {
			msg = re.Message()
		}
		return nil, registry.Errorf(registry.KindOf(berr), name, "the tool failed to load: %s", msg)
	}
	inv := e.reg.Invoke(ctx, name, args)
	return inv.Output, inv.Err
}

// callResult is the shape of `call --json`, shared with the HTTP API:
// {"ok":true,"result":...} or {"ok":false,"error":{"kind","message"}}.
func callResult(out json.RawMessage, err error) server.Result {
	if err == nil {
		return server.CallResult(out, nil)
	}
	return server.Result{Error: errorOf(err)}
}

// errorOf gives an error its stable kind and message for JSON output.
// Configuration and usage errors have kinds "config" and "usage".
func errorOf(err error) *server.ErrorInfo {
	var ce *configError
	var ue *usageError
	switch {
	case errors.As(err, &ce):
		return &server.ErrorInfo{Kind: "config", Message: err.Error()}
	case errors.As(err, &ue):
		return &server.ErrorInfo{Kind: "usage", Message: err.Error()}
	}
	return server.ErrorOf(err)
}

// writeJSONLine writes v as one line of JSON that is safe on a terminal
// (see terminalSafeJSON).
func writeJSONLine(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(callResult(nil, err))
	}
	w.Write(append(termsafe.JSON(b), '\n'))
}

// tools lists every configured tool: name, source, permissions, whether
// the policy lets it run, and why a broken one failed to load.
func (c *cli) tools(ctx context.Context, args []string) error {
	fs := newFlags("tools")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("usage: agrun tools [--json]")
	}
	e, err := c.openEnv(ctx, nil, false)
	if err != nil {
		return err
	}
	defer e.close()
	infos := e.infos()
	if *asJSON {
		if infos == nil {
			infos = []toolInfo{}
		}
		writeJSONLine(c.stdout, infos)
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tPERMISSIONS\tSTATUS\tDESCRIPTION")
	for _, ti := range infos {
		status := "ok"
		switch {
		case ti.Error != "":
			status = "broken: " + firstLine(ti.Error, 160)
		case !ti.Allowed:
			status = "denied: " + firstLine(ti.Denied, 160)
		}
		perms := strings.Join(ti.Permissions, ",")
		if perms == "" {
			perms = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safe(ti.Name), safe(ti.Source), perms, safe(status), textsafe.Truncate(ti.Description, 60))
	}
	return tw.Flush()
}
