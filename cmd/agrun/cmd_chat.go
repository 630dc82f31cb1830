package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/agcore/agrun/cmd/agrun/internal/session"
)

// chat is `agrun chat [--session ID]`: an interactive session over stdin,
// on a terminal or a pipe. Ctrl-C cancels the running turn (the history
// stays valid); a second Ctrl-C, /exit or EOF ends the session.
func (c *cli) chat(ctx context.Context, args []string) error {
	fs := newFlags("chat")
	sessID := fs.String("session", "", "continue (or start) this session")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("usage: agrun chat [--session ID]")
	}
	e, err := c.openEnv(ctx, nil, true)
	if err != nil {
		return err
	}
	defer e.close()
	cfg := e.cfg
	st, err := c.sessionStoreFor(cfg)
	if err != nil {
		return err
	}
	conv, err := c.openConversation(cfg, st, *sessID)
	if err != nil {
		return err
	}
	defer func() { conv.close() }()

	interactive := isTerminal(c.stdin)
	fmt.Fprintf(c.stderr, "agrun: session %s (%d messages). /tools, /history, /new, /exit\n", conv.id, len(conv.cycle.Messages()))

	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(c.stdin)
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
	for {
		if interactive {
			fmt.Fprint(c.stderr, "> ")
		}
		var line string
		select {
		case <-ctx.Done():
			return nil
		case <-c.interrupts:
			fmt.Fprintln(c.stderr)
			return nil // Ctrl-C at the prompt ends the session
		case err := <-readErr:
			return err // EOF (nil) or a read error
		case line = <-lines:
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case line == "/exit" || line == "/quit":
			return nil
		case line == "/tools":
			for _, ti := range e.infos() {
				status := "ok"
				if ti.Error != "" {
					status = "broken"
				} else if !ti.Allowed {
					status = "denied"
				}
				fmt.Fprintf(c.stdout, "%s\t%s\t%s\n", safe(ti.Name), safe(ti.Source), status)
			}
			continue
		case line == "/history":
			for _, m := range conv.cycle.Messages() {
				b, _ := json.Marshal(m)
				printMessage(c.stdout, b)
			}
			continue
		case line == "/new":
			conv.close()
			nc, err := c.openConversation(cfg, st, session.NewID())
			if err != nil {
				return err
			}
			conv = nc
			fmt.Fprintf(c.stderr, "agrun: new session %s\n", conv.id)
			continue
		case strings.HasPrefix(line, "/"):
			fmt.Fprintf(c.stderr, "agrun: unknown command %s (/tools, /history, /new, /exit)\n", safe(line))
			continue
		}
		if err := c.chatTurn(ctx, conv, e, line); err != nil {
			if errors.Is(err, errQuit) {
				return nil
			}
			fmt.Fprintf(c.stderr, "agrun: %s\n", safe(err.Error()))
		}
	}
}

var errQuit = errors.New("quit")

// chatTurn runs one prompt; a Ctrl-C while it runs cancels it, a second one
// quits.
func (c *cli) chatTurn(ctx context.Context, conv *conversation, e *env, prompt string) error {
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
	_, err := c.turn(tctx, conv, e.reg, prompt, false)
	close(stopped)
	select {
	case <-quit:
		return errQuit
	default:
	}
	if err != nil && tctx.Err() != nil && ctx.Err() == nil {
		return nil // cancelled by the user; the history is kept valid by the loop
	}
	return err
}

func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
