package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agcore/agrun/internal/cli/setup"
)

// mcpLogin is `agrun mcp login NAME`: the browser step of OAuth for a
// streamable-HTTP server. It prints the authorization URL (agrun opens no
// browser by itself: the URL comes from the server), waits on a loopback
// listener for the authorization server's redirect, exchanges the code
// and keeps the tokens (setup.Login), then lists the server's tools.
func (c *cli) mcpLogin(ctx context.Context, args []string) error {
	fs := newFlags("mcp login")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the browser's redirect")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageOf(fs, "needs the NAME of an [mcp.NAME] server")
	}
	name := pos[0]
	cfg, err := c.loadConfig()
	if err != nil {
		return err
	}
	s, ok := cfg.MCP[name]
	switch {
	case !ok:
		return usageOf(fs, "no [mcp.%s] in %s", safe(name), cfg.Path)
	case s.URL == "":
		return usageOf(fs, "[mcp.%s] is a command (stdio): login is for a streamable-HTTP server (url = ...)", safe(name))
	case s.OAuth == nil:
		return usageOf(fs, "[mcp.%s] has no oauth: add oauth = {} (or oauth = { client_id = \"...\" }) to use OAuth", safe(name))
	case s.OAuth.ClientCredentials:
		return usageOf(fs, "[mcp.%s] uses the client credentials grant: agrun authorizes itself when it connects, there is no login", safe(name))
	}
	n, tokens, err := setup.Login(ctx, name, s, *timeout, c.logger(), func(authURL, redirect string) {
		fmt.Fprintf(c.stderr, "agrun: to authorize agrun for %s, open this URL in a browser (on any machine; it redirects to %s here):\n\n  %s\n\nagrun: waiting for the browser (at most %s; Ctrl-C stops)...\n", safe(name), redirect, safe(authURL), *timeout)
	})
	if err != nil {
		return err
	}
	if tokens == "" {
		fmt.Fprintf(c.stdout, "%s did not ask for authorization: it serves %d tools without a login\n", safe(name), n)
		return nil
	}
	fmt.Fprintf(c.stdout, "logged in to %s: %d tools; the tokens are in %s (agrun refreshes them; run this again if the server revokes them)\n", safe(name), n, tokens)
	return nil
}
