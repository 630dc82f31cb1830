package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/mcp"
)

// loginTokens is a TokenStore for a login: it saves where the runs read,
// and loads nothing, so that the login authorizes anew.
type loginTokens struct{ mcp.FileTokens }

func (loginTokens) Load() (*mcp.OAuthSession, error) { return nil, nil }

// mcpLogin is `agrun mcp login NAME`: the browser step of OAuth for a
// streamable-HTTP server. It prints the authorization URL (agrun opens no
// browser by itself: the URL comes from the server), waits on a loopback
// listener for the authorization server's redirect, exchanges the code
// and keeps the tokens (mcpTokenPath), then lists the server's tools.
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
	}
	tr, err := setup.MCPTransport(name, s)
	if err != nil {
		return err
	}
	h := tr.(mcp.HTTP)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", s.OAuth.RedirectPort))
	if err != nil {
		return fmt.Errorf("the login's loopback listener ([mcp.%s] oauth.redirect_port): %w", name, err)
	}
	defer ln.Close()
	redirect := fmt.Sprintf("http://127.0.0.1:%d/callback", ln.Addr().(*net.TCPAddr).Port)
	results := make(chan *auth.AuthorizationResult, 16) // a stray request must not take the real redirect's place
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		if e := q.Get("error"); e != "" {
			fmt.Fprintf(w, "<p>agrun: the authorization server refused: %s</p>", html.EscapeString(e))
			select {
			case results <- &auth.AuthorizationResult{State: q.Get("state")}:
			default:
			}
			return
		}
		fmt.Fprintln(w, "<p>agrun is authorized. You can close this tab.</p>")
		select {
		case results <- &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}:
		default:
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	h.OAuth.RedirectURL = redirect
	h.OAuth.Tokens = loginTokens{h.OAuth.Tokens.(mcp.FileTokens)}
	h.OAuth.Authorize = func(ctx context.Context, authURL string) (*auth.AuthorizationResult, error) {
		fmt.Fprintf(c.stderr, "agrun: to authorize agrun for %s, open this URL in a browser (on any machine; it redirects to %s here):\n\n  %s\n\nagrun: waiting for the browser (at most %s; Ctrl-C stops)...\n", safe(name), redirect, safe(authURL), *timeout)
		want := ""
		if u, err := url.Parse(authURL); err == nil {
			want = u.Query().Get("state")
		}
		deadline := time.After(*timeout)
		for {
			select {
			case r := <-results:
				if want != "" && r.State != want {
					continue // not the redirect of this login (another page or process): wait on
				}
				if r.Code == "" {
					return nil, errors.New("the authorization server sent no code (refused, or the login was cancelled in the browser)")
				}
				return r, nil
			case <-deadline:
				return nil, fmt.Errorf("no redirect from the browser within %s (mcp login --timeout)", *timeout)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	cl, err := mcp.NewClient(name, h, &mcp.ClientOptions{Timeout: *timeout + time.Minute, Logger: c.logger()})
	if err != nil {
		return err
	}
	defer cl.Close(context.Background())
	if err := cl.Connect(ctx); err != nil {
		return err
	}
	p, _ := setup.MCPTokenPath(name, s.URL)
	if _, err := os.Stat(p); err != nil {
		fmt.Fprintf(c.stdout, "%s did not ask for authorization: it serves %d tools without a login\n", safe(name), len(cl.Tools()))
		return nil
	}
	fmt.Fprintf(c.stdout, "logged in to %s: %d tools; the tokens are in %s (agrun refreshes them; run this again if the server revokes them)\n", safe(name), len(cl.Tools()), p)
	return nil
}
