package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/cmd/agrun/internal/config"
	"github.com/agcore/agrun/cmd/agrun/internal/session"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
)

// progressEvery is how often a line on stderr says which tools are still
// running.
var progressEvery = 5 * time.Second

// conversation is one open session: the cycle and the locked session
// file it records every message in.
type conversation struct {
	id    string
	sess  *session.Session
	cycle *loop.Cycle
}

// openConversation opens (or creates) session id and builds a cycle that
// continues its history and writes every new message to it as it completes.
func (c *cli) openConversation(cfg *config.Config, st *session.Store, id string) (*conversation, error) {
	if id == "" {
		id = session.NewID()
	}
	sess, raw, warnings, err := st.Open(id)
	if err != nil {
		if errors.Is(err, session.ErrBadID) {
			return nil, usagef("%v", err)
		}
		return nil, err
	}
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "agrun: session %s: %s\n", id, w)
	}
	history, err := session.Decode[loop.Message](raw)
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	conv := &conversation{id: id, sess: sess}
	lc := loopConfig(cfg)
	lc.History = history
	lc.OnMessage = func(m loop.Message) { sess.Record(m) }
	cyc, err := loop.New(lc)
	if err != nil {
		sess.Close()
		return nil, &configError{fmt.Errorf("[llm]: %w", err)}
	}
	conv.cycle = cyc
	return conv, nil
}

// loopConfig is the model loop of the config's [llm] section, for the CLI's
// runs and the server's (History and OnMessage are set per run). The API
// key comes only from the variable api_key_env names.
func loopConfig(cfg *config.Config) loop.Config {
	lc := loop.Config{
		BaseURL:           cfg.LLM.BaseURL,
		APIKey:            os.Getenv(cfg.LLM.APIKeyEnv),
		Model:             cfg.LLM.Model,
		System:            cfg.LLM.System,
		Temperature:       cfg.LLM.Temperature,
		MaxTurns:          cfg.LLM.MaxTurns,
		ParallelToolCalls: cfg.LLM.ParallelToolCalls,
		RequestTimeout:    cfg.LLM.Timeout.Std(),
	}
	if cfg.LLM.MaxRetries != nil {
		lc.MaxRetries = *cfg.LLM.MaxRetries
		if lc.MaxRetries == 0 {
			lc.MaxRetries = -1 // "max_retries = 0" means none; the loop's 0 means its default
		}
	}
	return lc
}

func (cv *conversation) close() { cv.sess.Close() }

// runPrompt is `agrun run [--json] [--session ID] PROMPT`.
func (c *cli) runPrompt(ctx context.Context, args []string) int {
	fs := newFlags("run")
	asJSON := fs.Bool("json", false, "print every event as a JSON line")
	sessID := fs.String("session", "", "continue (or start) this session")
	pos, err := parseFlags(fs, args)
	if err == nil && len(pos) == 0 {
		err = usagef("usage: agrun run [--json] [--session ID] PROMPT")
	}
	prompt := strings.Join(pos, " ")
	id := *sessID
	var final string
	if err == nil {
		id, final, err = c.runOnce(ctx, prompt, id, *asJSON)
	}
	if *asJSON {
		if err != nil {
			e := errorOf(err)
			writeJSONLine(c.stdout, struct {
				Type    string `json:"type"`
				Kind    string `json:"kind"`
				Message string `json:"message"`
			}{"error", runErrorKind(err, e.Kind), e.Message})
		} else {
			writeJSONLine(c.stdout, struct {
				Type    string `json:"type"`
				Session string `json:"session"`
				Text    string `json:"text"`
			}{"done", id, final})
		}
		if err != nil {
			if isUsage(err) {
				return exitUsage
			}
			return exitFailure
		}
		return exitOK
	}
	return c.exit(err)
}

// runErrorKind names the way a run ended for --json output: the loop's
// kinds, plus session_locked, config and usage.
func runErrorKind(err error, fallback string) string {
	switch {
	case errors.Is(err, session.ErrLocked):
		return "session_locked"
	case isUsage(err):
		return fallback
	}
	var re *registry.Error
	if errors.As(err, &re) {
		return fallback
	}
	return string(loop.KindOf(err))
}

func (c *cli) runOnce(ctx context.Context, prompt, id string, asJSON bool) (string, string, error) {
	e, err := c.openEnv(ctx, nil, true)
	if err != nil {
		return id, "", err
	}
	defer e.close()
	st, err := c.sessionStoreFor(e.cfg)
	if err != nil {
		return id, "", err
	}
	conv, err := c.openConversation(e.cfg, st, id)
	if err != nil {
		return id, "", err
	}
	defer conv.close()
	if !asJSON {
		fmt.Fprintf(c.stderr, "agrun: session %s\n", conv.id)
	}
	final, err := c.turn(ctx, conv, e.reg, prompt, asJSON)
	return conv.id, final, err
}

// sessionStoreFor opens the sessions folder of cfg.
func (c *cli) sessionStoreFor(cfg *config.Config) (*session.Store, error) {
	dir := cfg.Sessions.Dir
	if dir == "" {
		dir = session.DefaultDir()
	}
	return session.OpenStore(dir)
}

// turn sends one prompt and streams the events: text to stdout, one line
// per tool call to stderr (or every event as JSON on stdout). It returns
// the final text.
func (c *cli) turn(ctx context.Context, conv *conversation, reg *registry.Registry, prompt string, asJSON bool) (string, error) {
	var final strings.Builder
	prog := newProgress(c.stderr)
	defer prog.stop()
	wroteText := false
	inputs := map[string]json.RawMessage{} // arguments of the calls in flight, by id
	var runErr error
	for ev, err := range conv.cycle.SubmitStreamWithTools(ctx, prompt, reg) {
		if err != nil {
			runErr = err
			break
		}
		if asJSON {
			writeJSONLine(c.stdout, ev)
		}
		switch ev := ev.(type) {
		case *loop.TextDelta:
			final.WriteString(ev.Text)
			if !asJSON {
				io.WriteString(c.stdout, safe(ev.Text))
				wroteText = true
			}
		case *loop.TurnComplete:
			if ev.Reason == "tool_calls" {
				final.Reset()
				if wroteText && !asJSON {
					io.WriteString(c.stdout, "\n")
					wroteText = false
				}
			}
		case *loop.ToolExecutionStarted:
			prog.start(ev.ID, ev.Name)
			inputs[ev.ID] = ev.Input
		case *loop.ToolExecutionCompleted:
			prog.done(ev.ID)
			if !asJSON {
				// One line per call: name, arguments, outcome, duration.
				fmt.Fprintf(c.stderr, "agrun: %s %s → %s (%s)\n", safe(ev.Name), safe(textsafe.Truncate(compact(inputs[ev.ID]), 60)),
					outcome(ev), ev.Duration.Round(time.Millisecond))
			}
		}
	}
	if wroteText && !asJSON {
		io.WriteString(c.stdout, "\n")
	}
	if runErr == nil {
		runErr = conv.sess.Err()
	}
	return final.String(), runErr
}

func outcome(ev *loop.ToolExecutionCompleted) string {
	if !ev.IsError {
		return "ok " + safe(textsafe.Truncate(compact(ev.Output), 60))
	}
	return "error (" + string(ev.ErrorKind) + ")"
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// progress prints, every progressEvery, which tools are still running, so
// a long call is visibly alive.
type progress struct {
	w       io.Writer
	mu      sync.Mutex
	running map[string]string // id -> name
	since   time.Time
	quit    chan struct{}
	once    sync.Once
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, running: map[string]string{}, quit: make(chan struct{})}
	go p.loop()
	return p
}

func (p *progress) start(id, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.running) == 0 {
		p.since = time.Now()
	}
	p.running[id] = name
}

func (p *progress) done(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.running, id)
}

func (p *progress) stop() { p.once.Do(func() { close(p.quit) }) }

func (p *progress) loop() {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			p.mu.Lock()
			if len(p.running) > 0 {
				names := make([]string, 0, len(p.running))
				for _, n := range p.running {
					names = append(names, safe(n))
				}
				fmt.Fprintf(p.w, "agrun: … still running: %s (%s)\n", strings.Join(names, ", "), time.Since(p.since).Round(time.Second))
			}
			p.mu.Unlock()
		}
	}
}

// warnBroken says on stderr which tools failed to load, which the policy
// denies (neither is offered to the model), and which grants a tool
// cannot use.
func (e *env) warnBroken(w io.Writer) {
	for _, ti := range e.infos() {
		switch {
		case ti.Error != "":
			fmt.Fprintf(w, "agrun: tool %s not available: %s\n", safe(ti.Name), firstLine(ti.Error, 300))
		case !ti.Allowed:
			fmt.Fprintf(w, "agrun: tool %s not offered: %s\n", safe(ti.Name), firstLine(ti.Denied, 300))
		}
		for _, warning := range ti.Warnings {
			fmt.Fprintf(w, "agrun: warning: tool %s: %s\n", safe(ti.Name), safe(warning))
		}
	}
}
