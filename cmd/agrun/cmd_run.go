package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
	last  turnStats // what the last turn cost
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
	// TODO(merge): lc.OnRequest = func(r loop.RequestInfo) { sess.RecordRequest(r) }
	// once session.Session.RecordRequest exists (another branch adds it).
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
		StreamIdleTimeout: cfg.LLM.StreamIdleTimeout.Std(),
		MaxRetryWait:      cfg.LLM.MaxRetryWait.Std(),
		MaxTotalTokens:    cfg.LLM.MaxTotalTokens,
		MaxToolCalls:      cfg.LLM.MaxToolCalls,
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

// runOptions are the flags of `agrun run` that shape one run.
type runOptions struct {
	json                    bool
	maxTokens, maxToolCalls int64 // budgets over the config's; 0: the config's
	quiet                   bool  // no summary line
}

// runPrompt is `agrun run [--json] [--session ID] [--show-reasoning] [-q]
// [--max-tokens N] [--max-tool-calls N] PROMPT`.
func (c *cli) runPrompt(ctx context.Context, args []string) int {
	fs := newFlags("run")
	var o runOptions
	fs.BoolVar(&o.json, "json", false, "print every event as a JSON line")
	sessID := fs.String("session", "", "continue (or start) this session")
	fs.BoolVar(&c.showReasoning, "show-reasoning", false, "show the model's reasoning, dimmed, on stderr")
	fs.BoolVar(&o.quiet, "q", false, "no summary line at the end")
	fs.BoolVar(&o.quiet, "quiet", false, "no summary line at the end")
	fs.Int64Var(&o.maxTokens, "max-tokens", 0, "stop the run once it has used this many tokens")
	fs.Int64Var(&o.maxToolCalls, "max-tool-calls", 0, "run at most this many tool calls")
	pos, err := parseFlags(fs, args)
	if err == nil && len(pos) == 0 {
		err = usagef("usage: agrun run [--json] [--session ID] [--show-reasoning] [-q] [--max-tokens N] [--max-tool-calls N] PROMPT")
	}
	if err == nil && (o.maxTokens < 0 || o.maxToolCalls < 0 || o.maxToolCalls > math.MaxInt32) {
		err = usagef("run: --max-tokens and --max-tool-calls must be positive")
	}
	prompt := strings.Join(pos, " ")
	var id, final string
	var stats turnStats
	if err == nil {
		id, stats, err = c.runOnce(ctx, prompt, *sessID, o)
		final = stats.text
	}
	if !o.quiet && !o.json && id != "" {
		fmt.Fprintf(c.stderr, "agrun: %s\n", stats.summary())
	}
	if o.json {
		if err != nil {
			e := errorOf(err)
			writeJSONLine(c.stdout, struct {
				Type    string `json:"type"`
				Kind    string `json:"kind"`
				Message string `json:"message"`
				Session string `json:"session,omitempty"`
			}{"error", runErrorKind(err, e.Kind), e.Message, id})
		} else {
			writeJSONLine(c.stdout, struct {
				Type      string     `json:"type"`
				Session   string     `json:"session"`
				Text      string     `json:"text"`
				Truncated bool       `json:"truncated,omitempty"`
				Usage     loop.Usage `json:"usage"`
			}{"done", id, final, stats.truncated, stats.usage})
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

// runOnce runs one prompt in session id (a new one if empty). It returns
// the session's id once the session is open ("" before), and what the run
// did.
func (c *cli) runOnce(ctx context.Context, prompt, id string, o runOptions) (string, turnStats, error) {
	e, err := c.openEnv(ctx, nil, true)
	if err != nil {
		return "", turnStats{}, err
	}
	defer e.close()
	if o.maxTokens > 0 {
		e.cfg.LLM.MaxTotalTokens = o.maxTokens
	}
	if o.maxToolCalls > 0 {
		e.cfg.LLM.MaxToolCalls = int(o.maxToolCalls)
	}
	st, err := c.sessionStoreFor(e.cfg)
	if err != nil {
		return "", turnStats{}, err
	}
	conv, err := c.openConversation(e.cfg, st, id)
	if err != nil {
		return "", turnStats{}, err
	}
	defer conv.close()
	if !o.json {
		fmt.Fprintf(c.stderr, "agrun: session %s\n", conv.id)
	}
	_, err = c.turn(ctx, conv, e.reg, prompt, o.json)
	return conv.id, conv.last, err
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
	rs := reasoningWriter{w: c.stderr, show: c.showReasoning && !asJSON}
	st := &conv.last
	*st = turnStats{start: time.Now()}
	var lastReason string
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
		if _, ok := ev.(*loop.ReasoningDelta); !ok {
			rs.end()
		}
		switch ev := ev.(type) {
		case *loop.ReasoningDelta:
			rs.write(ev.Text)
		case *loop.TextDelta:
			final.WriteString(ev.Text)
			if !asJSON {
				io.WriteString(c.stdout, safe(ev.Text))
				wroteText = true
			}
		case *loop.Retry:
			// The reply starts over: what was shown of it is void.
			final.Reset()
			if wroteText && !asJSON {
				io.WriteString(c.stdout, "\n")
				wroteText = false
			}
			st.retries++
			fmt.Fprintf(c.stderr, "agrun: %s, retrying in %s (%d/%d)\n", retryWhat(ev), roundWait(ev.Wait), ev.Attempt, ev.Max)
		case *loop.TurnComplete:
			st.requests++
			st.usage = st.usage.Add(ev.Usage)
			lastReason = ev.Reason
			if ev.Reason == "tool_calls" {
				final.Reset()
				if wroteText && !asJSON {
					io.WriteString(c.stdout, "\n")
					wroteText = false
				}
			}
		case *loop.ToolExecutionStarted:
			st.toolCalls++
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
	rs.end()
	if wroteText && !asJSON {
		io.WriteString(c.stdout, "\n")
	}
	if runErr == nil {
		runErr = conv.sess.Err()
	}
	st.text, st.elapsed = final.String(), time.Since(st.start)
	if runErr == nil && lastReason == "length" {
		st.truncated = true
		fmt.Fprintln(c.stderr, `agrun: warning: the answer was cut off at the model's output limit (finish_reason "length")`)
	}
	return final.String(), runErr
}

// turnStats is what one turn of `run` or `chat` did, for the summary line
// and the done event.
type turnStats struct {
	text      string
	truncated bool // the final answer ended with finish_reason "length"
	requests  int  // model requests that completed
	retries   int
	toolCalls int // calls that ran
	usage     loop.Usage
	start     time.Time
	elapsed   time.Duration
}

// summary is the line `run` ends with on stderr: "2 requests, 1 tool
// call, 1234 tokens (1200 prompt, 34 completion), 3.1s".
func (s turnStats) summary() string {
	parts := []string{plural(s.requests, "request")}
	if s.retries > 0 {
		parts = append(parts, plural(s.retries, "retry"))
	}
	parts = append(parts, plural(s.toolCalls, "tool call"))
	u := s.usage
	tokens := fmt.Sprintf("%d tokens (%d prompt", u.TotalTokens, u.PromptTokens)
	if u.CachedTokens > 0 {
		tokens += fmt.Sprintf(", %d cached", u.CachedTokens)
	}
	tokens += fmt.Sprintf(", %d completion", u.CompletionTokens)
	if u.ReasoningTokens > 0 {
		tokens += fmt.Sprintf(", %d reasoning", u.ReasoningTokens)
	}
	parts = append(parts, tokens+")", s.elapsed.Round(100*time.Millisecond).String())
	return strings.Join(parts, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(what, "y"))
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// retryWhat says what failed before a retry: "429 from provider", or the
// loop's reason (a broken or stalled stream, a connection error).
func retryWhat(ev *loop.Retry) string {
	if ev.Status != 0 {
		return fmt.Sprintf("%d from provider", ev.Status)
	}
	return safe(ev.Reason)
}

// roundWait shows a wait as "3s", "2m0s" or "500ms".
func roundWait(d time.Duration) string {
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// reasoningWriter shows reasoning deltas on stderr when asked: dimmed on
// a terminal (unless NO_COLOR is set), plain elsewhere, ended by a newline
// when the reply proper starts.
type reasoningWriter struct {
	w    io.Writer
	show bool
	open bool
	dim  bool
}

func (r *reasoningWriter) write(text string) {
	if !r.show {
		return
	}
	if !r.open {
		r.open = true
		r.dim = isTerminal(r.w) && os.Getenv("NO_COLOR") == ""
		if r.dim {
			io.WriteString(r.w, "\x1b[2m")
		}
	}
	io.WriteString(r.w, safe(text))
}

func (r *reasoningWriter) end() {
	if !r.open {
		return
	}
	r.open = false
	if r.dim {
		io.WriteString(r.w, "\x1b[0m")
	}
	io.WriteString(r.w, "\n")
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

// warnBroken says on stderr which tools failed to load.
func (e *env) warnBroken(w io.Writer) {
	for _, ti := range e.infos() {
		if ti.Error != "" {
			fmt.Fprintf(w, "agrun: tool %s not available: %s\n", safe(ti.Name), safe(firstLine(ti.Error, 200)))
		}
	}
}
