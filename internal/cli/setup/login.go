package setup

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/mcp"
)

// LoginRedirect is the loopback end of an OAuth login (`agrun mcp
// login`): it listens on 127.0.0.1 for the authorization server's
// redirect, which the person's browser follows. Close it when done.
type LoginRedirect struct {
	// URL is the redirect URL to register: http://127.0.0.1:PORT/callback.
	URL     string
	ln      net.Listener
	srv     *http.Server
	results chan *auth.AuthorizationResult
}

// ListenLogin starts a LoginRedirect on port (0: any free one).
func ListenLogin(port int) (*LoginRedirect, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	l := &LoginRedirect{ln: ln, URL: fmt.Sprintf("http://127.0.0.1:%d/callback", ln.Addr().(*net.TCPAddr).Port)}
	results := make(chan *auth.AuthorizationResult, 16) // a stray request must not take the real redirect's place
	l.results = results
	l.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	go l.srv.Serve(ln)
	return l, nil
}

// Close stops listening.
func (l *LoginRedirect) Close() {
	l.srv.Close()
	l.ln.Close()
}

// Wait waits, at most timeout, for the redirect of the login at authURL
// (the one carrying its state; others are ignored), and returns its
// code. A refusal, the timeout and the end of ctx are errors.
func (l *LoginRedirect) Wait(ctx context.Context, authURL string, timeout time.Duration) (*auth.AuthorizationResult, error) {
	want := ""
	if u, err := url.Parse(authURL); err == nil {
		want = u.Query().Get("state")
	}
	deadline := time.After(timeout)
	for {
		select {
		case r := <-l.results:
			if want != "" && r.State != want {
				continue // not the redirect of this login (another page or process): wait on
			}
			if r.Code == "" {
				return nil, errors.New("the authorization server sent no code (refused, or the login was cancelled in the browser)")
			}
			return r, nil
		case <-deadline:
			return nil, fmt.Errorf("no redirect from the browser within %s (mcp login --timeout)", timeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// LoginTokens is a TokenStore for a login: it saves where the runs read,
// and loads nothing, so that the login authorizes anew.
type LoginTokens struct{ mcp.FileTokens }

// Load returns no session: a login starts from none.
func (LoginTokens) Load() (*mcp.OAuthSession, error) { return nil, nil }

// Login is `agrun mcp login NAME`: the browser step of OAuth for the
// streamable-HTTP server s ([mcp.NAME] with oauth). It listens on
// loopback for the authorization server's redirect (oauth.redirect_port),
// has show tell the person the authorization URL and the redirect URL
// (agrun opens no browser by itself: the URL comes from the server),
// waits at most timeout for the redirect, exchanges the code and keeps
// the tokens where the runs read them (MCPTokenPath). It returns how many
// tools the server then lists, and the tokens' file ("" when the server
// asked for no authorization).
func Login(ctx context.Context, name string, s config.MCPServer, timeout time.Duration, log *slog.Logger, show func(authURL, redirect string)) (tools int, tokens string, err error) {
	tr, err := MCPTransport(name, s)
	if err != nil {
		return 0, "", err
	}
	h := tr.(mcp.HTTP)
	login, err := ListenLogin(s.OAuth.RedirectPort)
	if err != nil {
		return 0, "", fmt.Errorf("the login's loopback listener ([mcp.%s] oauth.redirect_port): %w", name, err)
	}
	defer login.Close()
	h.OAuth.RedirectURL = login.URL
	h.OAuth.Tokens = LoginTokens{FileTokens: h.OAuth.Tokens.(mcp.FileTokens)}
	h.OAuth.Authorize = func(ctx context.Context, authURL string) (*auth.AuthorizationResult, error) {
		show(authURL, login.URL)
		return login.Wait(ctx, authURL, timeout)
	}
	cl, err := mcp.NewClient(name, h, &mcp.ClientOptions{Timeout: timeout + time.Minute, Logger: log})
	if err != nil {
		return 0, "", err
	}
	defer cl.Close(context.Background())
	if err := cl.Connect(ctx); err != nil {
		return 0, "", err
	}
	p, _ := MCPTokenPath(name, s.URL)
	if _, err := os.Stat(p); err != nil {
		return len(cl.Tools()), "", nil
	}
	return len(cl.Tools()), p, nil
}
