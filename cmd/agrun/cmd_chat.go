package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"golang.org/x/term"
	"os"
	"strings"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// chat is `agrun chat [FLAGS]`: an interactive session over stdin, on a
// terminal or a pipe. Ctrl-C cancels the running turn (the history stays
// valid); a second Ctrl-C, /exit or EOF ends the session. It takes run's
// runOptions flags and --show-reasoning, not --json, -q, the budgets,
// --schema, --trace or a prompt.
func (c *cli) chat(ctx context.Context, args []string) error {
	fs := newFlags("chat")
	var o runOptions
	o.define(fs)
	fs.BoolVar(&c.showReasoning, "show-reasoning", false, "show the model's reasoning, dimmed, on stderr")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := o.check(fs, pos); err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments: the prompts come from stdin")
	}
	if cfg, err := c.loadConfig(); err == nil && cfg.Cluster.Enabled() {
		return c.chatOnCluster(ctx, fs, cfg, &o)
	}
	e, reg, err := c.prepareRun(ctx, fs, &o)
	if err != nil {
		return err
	}
	defer e.close()
	tel, err := c.setupTelemetry(ctx, e, false)
	if err != nil {
		return err
	}
	c.tel = tel
	defer c.shutdownTelemetry(tel)
	st, err := c.sessionStoreFor(e.cfg)
	if err != nil {
		return err
	}
	id, err := c.sessionID(st, &o)
	if err != nil {
		return err
	}
	conv, err := c.openConversation(e.cfg, st, id)
	if err != nil {
		return err
	}
	s := &chatSession{cli: c, env: e, reg: reg, store: st, conv: conv}
	defer func() { s.conv.Close() }() // the session open at the end, after any /new
	fmt.Fprintf(c.stderr, "agrun: session %s (%d messages). /tools, /history, /new, /exit\n", conv.ID, len(conv.Cycle.Messages()))
	return s.loop(ctx)
}

// chatSession is one `agrun chat`: its tools, its session store and the
// conversation under way (/new replaces it).
type chatSession struct {
	*cli
	env   *env
	reg   *registry.Registry // the tools offered (nil: none)
	store *session.Files
	conv  *conversation
}

// loop reads lines until /exit, EOF, a Ctrl-C at the prompt or the end of
// ctx: each is a command or a prompt for one turn.
func (s *chatSession) loop(ctx context.Context) error {
	interactive := s.isTTY(s.stdin)
	lines, readErr := s.readLines(ctx)
	if interactive { // approval questions read the same lines (approvals.go)
		s.inMu.Lock()
		s.lineIn = func(ctx context.Context) (string, error) { return nextLine(ctx, lines, readErr) }
		s.inMu.Unlock()
	}
	for {
		line, end, err := s.prompt(ctx, interactive, lines, readErr)
		if end {
			return err
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "/") {
			if done, err := s.command(line); done || err != nil {
				return err
			}
			continue
		}
		if err := s.chatTurn(ctx, s.conv, s.reg, line); err != nil {
			if errors.Is(err, errQuit) {
				return nil
			}
			fmt.Fprintf(s.stderr, "agrun: %s\n", safe(err.Error()))
		}
	}
}

// prompt reads the next line at the "> " prompt as an answer is read:
// holding c.asking, so that an MCP server's question between turns
// waits and takes none of its lines. end: the session ends (err: why).
func (s *chatSession) prompt(ctx context.Context, interactive bool, lines chan string, readErr chan error) (line string, end bool, err error) {
	s.asking.Lock()
	defer s.asking.Unlock()
	if interactive {
		fmt.Fprint(s.stderr, "> ")
	}
	select {
	case <-ctx.Done():
		return "", true, nil
	case <-s.interrupts:
		fmt.Fprintln(s.stderr)
		return "", true, nil // Ctrl-C at the prompt ends the session
	case err := <-readErr:
		return "", true, err // EOF (nil) or a read error
	case line = <-lines:
		return line, false, nil
	}
}

// readLines reads stdin on its own goroutine, so that a Ctrl-C at the
// prompt is seen while a read waits. The error channel gets nil at EOF.
func (s *chatSession) readLines(ctx context.Context) (chan string, chan error) {
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(s.stdin)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	return lines, readErr
}

// command runs one slash command; done says the session ends.
func (s *chatSession) command(line string) (done bool, err error) {
	switch line {
	case "/exit", "/quit":
		return true, nil
	case "/tools":
		for _, ti := range s.env.infos() {
			status := "ok"
			if ti.Error != "" {
				status = "broken"
			} else if !ti.Allowed {
				status = "denied"
			}
			fmt.Fprintf(s.stdout, "%s\t%s\t%s\n", safe(ti.Name), safe(ti.Source), status)
		}
	case "/history":
		for _, m := range s.conv.Cycle.Messages() {
			session.WriteMessage(s.stdout, m)
		}
	case "/new":
		s.conv.Close()
		nc, err := s.openConversation(s.env.cfg, s.store, session.NewID())
		if err != nil {
			return true, err
		}
		s.conv = nc
		fmt.Fprintf(s.stderr, "agrun: new session %s\n", s.conv.ID)
	default:
		fmt.Fprintf(s.stderr, "agrun: unknown command %s (/tools, /history, /new, /exit)\n", safe(line))
	}
	return false, nil
}

var errQuit = errors.New("quit")

// chatTurn runs one prompt; a Ctrl-C while it runs cancels it, a second one
// quits.
func (c *cli) chatTurn(ctx context.Context, conv *conversation, reg *registry.Registry, prompt string) error {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		select {
		case <-c.interrupts:
			fmt.Fprintln(c.stderr, "\nagrun: cancelled (Ctrl-C again to exit)")
			cancel()
		case <-stopped:
			return
		}
		select {
		case <-c.interrupts:
			close(quit)
		case <-stopped:
		}
	}()
	_, err := c.turn(tctx, conv, reg, prompt, false)
	close(stopped)
	select {
	case <-quit:
		return errQuit
	default:
	}
	if err != nil && tctx.Err() != nil && ctx.Err() == nil {
		return nil // cancelled by the user; the history is kept valid by the loop
	}
	return withLimitHint(err)
}

// isTerminal reports whether r is a terminal (a TTY), not only a
// character device.
func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	// A character device is not enough: /dev/null is one, and `agrun run
	// ... </dev/null` must be non-interactive (x/term asks the terminal
	// driver: an ioctl on Unix, the console mode on Windows).
	return ok && term.IsTerminal(int(f.Fd()))
}
