package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// progressEvery is how often a line on stderr says which tools are still
// running.
var progressEvery = 5 * time.Second

// conversation is one open session (setup.Conversation) and what the
// command keeps of it: what the last turn cost, and run --approve/--deny's
// decisions for the paused calls.
type conversation struct {
	*setup.Conversation
	last   turnStats
	resume map[string]loop.Decision
}

// openConversation opens (or creates) session id (setup.OpenConversation),
// its approvals asked at the terminal (approverFor).
func (c *cli) openConversation(cfg *config.Config, st *session.Files, id string, schema ...json.RawMessage) (*conversation, error) {
	var sch json.RawMessage
	if len(schema) > 0 {
		sch = schema[0]
	}
	cv, warnings, err := setup.OpenConversation(cfg, st, id, func(id string) loop.Approver { return c.approverFor(cfg, id) }, sch)
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "agrun: session %s: %s\n", id, w)
	}
	switch {
	case errors.Is(err, session.ErrBadID):
		return nil, usagef("%v", err)
	case errors.Is(err, registry.ErrInvalidSchema):
		return nil, usagef("--schema: %v", err)
	case err != nil:
		return nil, err
	}
	return &conversation{Conversation: cv}, nil
}

// runPrompt is `agrun run [FLAGS] PROMPT`.
func (c *cli) runPrompt(ctx context.Context, args []string) int {
	fs := newFlags("run")
	asJSON := fs.Bool("json", false, "print every event as a JSON line on stdout")
	var o runOptions
	o.define(fs)
	fs.BoolVar(&c.showReasoning, "show-reasoning", false, "show the model's reasoning, dimmed, on stderr")
	fs.BoolVar(&o.quiet, "quiet", false, "no summary line on stderr at the end")
	alias(fs, "quiet", "q")
	fs.Int64Var(&o.maxTokens, "max-tokens", 0, "end the run once it has used `N` tokens (default: [llm] max_total_tokens)")
	fs.Int64Var(&o.maxToolCalls, "max-tool-calls", 0, "run at most `N` tool calls (default: [llm] max_tool_calls)")
	o.defineResume(fs)
	fs.StringVar(&o.schemaArg, "schema", "", "the final answer must be JSON matching this JSON Schema (`FILE`.json, or inline JSON); only that JSON is printed")
	fs.BoolVar(&o.trace, "trace", false, "print the run's span tree (model requests, tool calls, durations, tokens) on stderr at the end")
	fs.Var((*stringList)(&o.resources), "resource", "attach the resource `SERVER:URI` of an [mcp.SERVER] server to the prompt (repeatable)")
	fs.StringVar(&o.promptRef, "prompt", "", "start from the prompt `SERVER:NAME` of an [mcp.SERVER] server; the arguments are its KEY=VALUE arguments")
	pos, err := c.parseFlags(fs, args)
	if isHelp(err) {
		return c.exit(err)
	}
	if err == nil {
		err = o.check(fs, pos)
	}
	if err == nil {
		err = o.checkResume(fs, pos)
	}
	c.deferApprovals = *asJSON // scripts decide with --approve/--deny
	if err == nil && (o.maxTokens < 0 || o.maxToolCalls < 0 || o.maxToolCalls > math.MaxInt32) {
		err = usageOf(fs, "--max-tokens and --max-tool-calls must be positive")
	}
	if err == nil && o.schemaArg != "" {
		if o.schema, err = readSchema(o.schemaArg); err != nil {
			err = usageOf(fs, "%v", err)
		}
	}
	var prompt string
	if err == nil && o.promptRef != "" {
		err = o.parsePromptArgs(fs, pos)
	} else if err == nil && o.resume == nil {
		prompt, err = c.readPrompt(fs, pos)
	}
	var id string
	var stats turnStats
	if err == nil {
		id, stats, err = c.runOnce(ctx, fs, prompt, &o, *asJSON)
		err = withLimitHint(err)
	}
	final := stats.text
	interrupted := err != nil && ctx.Err() != nil
	if !o.quiet && !*asJSON && id != "" && !interrupted {
		fmt.Fprintf(c.stderr, "agrun: %s\n", stats.summary())
	}
	if *asJSON {
		if interrupted {
			writeJSONLine(c.stdout, runError{"error", "interrupted", "interrupted", id})
			return exitInterrupted
		}
		if p, ok := pendingLine(err, id); ok {
			writeJSONLine(c.stdout, p)
			return exitApproval
		}
		if err != nil {
			e := errorOf(err)
			writeJSONLine(c.stdout, runError{"error", runErrorKind(err, e.Kind), e.Message, id})
			c.usageHint(err)
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
	if interrupted {
		fmt.Fprintln(c.stderr, "agrun: interrupted")
		return exitInterrupted
	}
	return c.exit(err)
}

// runError is the last line of a failed `run --json`; Session names the
// session once it was opened (and kept), so that a script can resume it.
type runError struct {
	Type    string `json:"type"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Session string `json:"session,omitempty"`
}

// runOptions are the flags run and chat share: per-run overrides of [llm],
// which session, which tools.
type runOptions struct {
	model, system, baseURL string
	maxTurns               int
	cont                   bool
	session                string
	tools                  string
	noTools                bool
	set                    map[string]bool // the flags given, by their main name

	// run only: no summary line; budgets over the config's (0: the
	// config's); --schema as given, and the schema it names.
	quiet                   bool
	maxTokens, maxToolCalls int64
	schemaArg               string
	schema                  json.RawMessage
	trace                   bool                     // --trace: the span tree on stderr at the end
	resume                  map[string]loop.Decision // --approve, --deny (run_resume.go)
	resources               []string                 // --resource SERVER:URI (run_mcp.go)
	promptRef               string                   // --prompt SERVER:NAME
	promptArgs              map[string]string        // its KEY=VALUE arguments
}

func (o *runOptions) define(fs *flag.FlagSet) {
	fs.StringVar(&o.model, "model", "", "use `MODEL` for this run (default: [llm] model)")
	alias(fs, "model", "m")
	fs.StringVar(&o.system, "system", "", "use `PROMPT` as the system prompt for this run; \"\" for none (default: [llm] system)")
	alias(fs, "system", "s")
	fs.IntVar(&o.maxTurns, "max-turns", 0, "at most `N` model requests for this run (default: [llm] max_turns)")
	fs.StringVar(&o.baseURL, "base-url", "", "use the OpenAI-compatible API at `URL` for this run (default: [llm] base_url)")
	fs.BoolVar(&o.cont, "continue", false, "continue the most recently used session")
	alias(fs, "continue", "c")
	fs.StringVar(&o.session, "session", "", "continue session `ID`, or start it under that id")
	fs.StringVar(&o.tools, "tools", "", "offer only the tools `NAMES` (comma-separated) to the model")
	fs.BoolVar(&o.noTools, "no-tools", false, "offer no tools to the model")
}

// check validates the flags after parsing.
func (o *runOptions) check(fs *flag.FlagSet, pos []string) error {
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		names := map[string]string{"m": "model", "s": "system", "c": "continue"}
		if n, ok := names[f.Name]; ok {
			o.set[n] = true
		}
		o.set[f.Name] = true
	})
	switch {
	case o.cont && o.session != "":
		return usageOf(fs, "-c/--continue and --session cannot be used together")
	case o.tools != "" && o.noTools:
		return usageOf(fs, "--tools and --no-tools cannot be used together")
	case o.set["tools"] && len(o.toolNames()) == 0:
		return usageOf(fs, "--tools needs tool names (or use --no-tools)")
	case o.set["max-turns"] && o.maxTurns < 1:
		return usageOf(fs, "--max-turns must be at least 1")
	case o.set["model"] && strings.TrimSpace(o.model) == "":
		return usageOf(fs, "--model needs a model name")
	case o.set["base-url"] && !validBaseURL(o.baseURL):
		return usageOf(fs, "--base-url %q is not an http(s) URL", o.baseURL)
	}
	// `agrun run -c agrun.toml PROMPT`: -c after the command is
	// --continue; the config is --config there, or -c before the command.
	if o.cont && len(pos) > 0 && strings.HasSuffix(pos[0], ".toml") {
		if fi, err := os.Stat(pos[0]); err == nil && fi.Mode().IsRegular() {
			return usageOf(fs, "-c after %s is --continue; a config file is --config %s after the command, or -c before it: agrun -c %s %s ...", fs.Name(), pos[0], pos[0], fs.Name())
		}
	}
	return nil
}

func validBaseURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// toolNames are the names --tools lists.
func (o *runOptions) toolNames() []string {
	var names []string
	for _, n := range strings.Split(o.tools, ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// apply overrides cfg's [llm] with the flags given.
func (o *runOptions) apply(cfg *config.Config) {
	if o.set["model"] {
		cfg.LLM.Model = o.model
	}
	if o.set["system"] {
		cfg.LLM.System = o.system
	}
	if o.set["max-turns"] {
		cfg.LLM.MaxTurns = o.maxTurns
	}
	if o.set["base-url"] {
		cfg.LLM.BaseURL = o.baseURL
	}
}

// filter is what newEnv loads for the run: every tool, only those --tools
// names (and the MCP servers behind them), or none. A name that is not in
// the config is a usage error.
func (o *runOptions) filter(fs *flag.FlagSet, cfg *config.Config) (loadFilter, error) {
	if o.noTools {
		return func(string, string) bool { return false }, nil
	}
	names := o.toolNames()
	if len(names) == 0 {
		return nil, nil
	}
	f, missing := setup.Named(cfg, names)
	if missing != "" {
		return nil, usageOf(fs, "--tools: no tool %q in the config (`agrun tools` lists them)", missing)
	}
	return f, nil
}

// offered is the registry the model is offered for the run: nil with
// --no-tools, only the --tools names with --tools (a named tool that
// failed to load, or that its MCP server does not have, is a
// configuration error), else every tool.
func (o *runOptions) offered(fs *flag.FlagSet, e *env) (*registry.Registry, error) {
	if o.noTools {
		return nil, nil
	}
	names := o.toolNames()
	if len(names) == 0 {
		return e.reg, nil
	}
	reg := e.NewRegistry()
	for _, n := range names {
		if err := e.BrokenFor(n); err != nil {
			return nil, &configError{fmt.Errorf("--tools: tool %s failed to load: %w", n, err)}
		}
		t, ok := e.reg.Get(n)
		if !ok {
			return nil, usageOf(fs, "--tools: no tool %q (`agrun tools` lists them)", n)
		}
		if err := reg.Register(t); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// maxStdinPrompt bounds what run reads from stdin as (part of) the prompt.
const maxStdinPrompt = 1 << 20

// readPrompt is the prompt of a run: the arguments; or stdin when the
// only argument is "-", or when there are none and stdin is not a
// terminal; with arguments and a stdin that is not a terminal (a pipe or
// a file), the arguments then a blank line then stdin (as `llm` does). At
// most maxStdinPrompt bytes of stdin are read; a longer input is cut,
// saying so on stderr.
func (c *cli) readPrompt(fs *flag.FlagSet, pos []string) (string, error) {
	prompt := strings.Join(pos, " ")
	dash := len(pos) == 1 && pos[0] == "-"
	if !dash && c.isTTY(c.stdin) {
		if prompt == "" {
			return "", usageOf(fs, "needs a PROMPT (or - to read it from stdin)")
		}
		return prompt, nil
	}
	b, err := io.ReadAll(io.LimitReader(c.stdin, maxStdinPrompt+1))
	if err != nil {
		return "", fmt.Errorf("reading the prompt from stdin: %w", err)
	}
	if len(b) > maxStdinPrompt {
		b = b[:maxStdinPrompt]
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1] // do not cut a character in two
		}
		fmt.Fprintf(c.stderr, "agrun: stdin is longer than %d MiB: only its first %d MiB is sent\n", maxStdinPrompt>>20, maxStdinPrompt>>20)
	}
	in := strings.ToValidUTF8(string(b), "\uFFFD")
	switch {
	case dash || prompt == "":
		prompt = in
	case strings.TrimSpace(in) != "":
		prompt += "\n\n" + in
	}
	if strings.TrimSpace(prompt) == "" {
		return "", usageOf(fs, "needs a PROMPT (an argument, or text on stdin)")
	}
	return prompt, nil
}

// runErrorKind names the way a run ended for --json output: the loop's
// kinds (loop.Kind), plus session_locked, config and usage; runPrompt
// adds interrupted (Ctrl-C, exit 130).
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
	if kind, ok := setup.ClusterErrorKind(err); ok {
		return kind
	}
	return string(loop.KindOf(err))
}

// prepareRun loads the config with o's overrides, checks the API key
// (before any tool is loaded or session touched), and loads the tools o
// selects. The caller closes the env.
func (c *cli) prepareRun(ctx context.Context, fs *flag.FlagSet, o *runOptions) (*env, *registry.Registry, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return nil, nil, err
	}
	o.apply(cfg)
	// A usage error (--tools naming no tool) before the key: it is what
	// the person typed, and fixing the key first would only lead to it.
	filter, err := o.filter(fs, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := setup.CheckAPIKey(cfg); err != nil {
		return nil, nil, err
	}
	e, err := c.envFor(ctx, cfg, filter, true)
	if err != nil {
		return nil, nil, err
	}
	reg, err := o.offered(fs, e)
	if err != nil {
		e.close()
		return nil, nil, err
	}
	return e, reg, nil
}

// sessionID is the session a run uses: --session, the most recently used
// one with --continue, else "" (a new one).
func (c *cli) sessionID(st session.Admin, o *runOptions) (string, error) {
	if !o.cont {
		return o.session, nil
	}
	infos, err := st.Summaries(context.Background())
	if err != nil {
		return "", err
	}
	if len(infos) == 0 {
		fmt.Fprintln(c.stderr, "agrun: no saved session to continue: starting a new one")
		return "", nil
	}
	return infos[0].ID, nil
}

// runOnce runs one prompt in the session o selects. It returns the
// session's id once the session is open and kept ("" before, and for a
// new session removed because its first request failed), and what the
// run did.
func (c *cli) runOnce(ctx context.Context, fs *flag.FlagSet, prompt string, o *runOptions, asJSON bool) (string, turnStats, error) {
	if cfg, err := c.loadConfig(); err == nil && cfg.Cluster.Enabled() {
		return c.runOnCluster(ctx, fs, cfg, prompt, o, asJSON)
	}
	e, reg, err := c.prepareRun(ctx, fs, o)
	if err != nil {
		return "", turnStats{}, err
	}
	defer e.close()
	if prompt, err = c.mcpPrompt(ctx, fs, e, o, prompt); err != nil {
		return "", turnStats{}, err
	}
	tel, err := c.setupTelemetry(ctx, e, o.trace)
	if err != nil {
		return "", turnStats{}, err
	}
	c.tel = tel
	defer c.shutdownTelemetry(tel)
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
	id, err := c.sessionID(st, o)
	if err != nil {
		return "", turnStats{}, err
	}
	conv, err := c.openConversation(e.cfg, st, id, o.schema)
	if err != nil {
		return "", turnStats{}, err
	}
	defer conv.Close()
	conv.resume = o.resume
	if !asJSON {
		fmt.Fprintf(c.stderr, "agrun: session %s\n", conv.ID)
	}
	_, err = c.turn(ctx, conv, reg, prompt, asJSON)
	if o.trace {
		tel.WriteTree(c.stderr)
	}
	if !conv.Kept() {
		if !asJSON {
			fmt.Fprintf(c.stderr, "agrun: session %s not kept: its first request failed (name a session with --session to keep it)\n", conv.ID)
		}
		return "", conv.last, err // removed on close: no session to name
	}
	return conv.ID, conv.last, err
}

// sessionStoreFor opens the sessions folder of cfg.
func (c *cli) sessionStoreFor(cfg *config.Config) (*session.Files, error) {
	return setup.SessionStore(cfg)
}

// turn sends one prompt and streams the events: text to stdout, one line
// per tool call to stderr (or every event as JSON on stdout). It returns
// the final text.
func (c *cli) turn(ctx context.Context, conv *conversation, reg *registry.Registry, prompt string, asJSON bool) (string, error) {
	p := c.newPrinter(&conv.last, asJSON, conv.Schema)
	defer p.stop()
	var runErr error
	// The turn's span (telemetry on): the loop's callbacks feed it the
	// requests, the events its tool calls.
	ctx, trace := c.tel.StartRun(ctx, conv.RunInfo(c.tel, reg))
	conv.Trace.Store(trace)
	// MCP servers' sampling during the turn counts in its budget and
	// its session.
	// They are recorded here, on the run's goroutine (Flush at each
	// event, EndRun), and shown to a --json reader as mcp_decision lines.
	c.samp.StartRun(conv.Cycle, func(r loop.DecisionRecord) {
		conv.Session.RecordDecision(r)
		if asJSON {
			writeJSONLine(c.stdout, setup.MCPDecisionOf(r))
		}
	}, func(r loop.RequestInfo) { conv.Session.RecordRequest(r) })
	defer c.samp.EndRun()
	defer func() {
		conv.Trace.Store(nil)
		trace.Finish(runErr)
	}()
	for ev, err := range conv.events(ctx, prompt, reg) {
		c.samp.Flush()
		if err != nil {
			runErr = err
			break
		}
		trace.Event(ev)
		if ev, ok := ev.(*loop.ToolExecutionCompleted); ok {
			// What the call did, for `agrun audit`, beside the messages.
			conv.Session.RecordCall(session.CallOf(ev))
		}
		p.show(ev)
	}
	if runErr == nil {
		runErr = conv.Session.Err()
	}
	p.end(runErr)
	return conv.last.text, runErr
}

// printer shows a run's events as they come: the reply's text on stdout,
// reasoning (when asked), retries and one line per tool call on stderr;
// with --json every event as a JSON line on stdout instead. It keeps the
// turn's stats. The local loop's events and a cluster run's replayed
// ones go through the same printer, so both look the same.
type printer struct {
	c              *cli
	asJSON, schema bool // schema: only the checked JSON is printed
	st             *turnStats
	final          strings.Builder
	wroteText      bool
	rs             reasoningWriter
	lastReason     string
	inputs         map[string]json.RawMessage // arguments of the calls in flight, by id
	prog           *progress
}

func (c *cli) newPrinter(st *turnStats, asJSON, schema bool) *printer {
	*st = turnStats{start: time.Now()}
	return &printer{c: c, asJSON: asJSON, schema: schema, st: st, inputs: map[string]json.RawMessage{},
		rs: reasoningWriter{w: c.stderr, show: c.showReasoning && !asJSON}, prog: newProgress(c.stderr)}
}

// newline ends the reply's text on stdout, if any was written.
func (p *printer) newline() {
	if p.wroteText && !p.asJSON {
		io.WriteString(p.c.stdout, "\n")
		p.wroteText = false
	}
}

func (p *printer) show(ev loop.Event) {
	c, st := p.c, p.st
	if _, isReasoning := ev.(*loop.ReasoningDelta); p.asJSON && (!isReasoning || c.showReasoning) {
		// Reasoning is shown only when asked, in --json too.
		writeJSONLine(c.stdout, ev)
	}
	if _, ok := ev.(*loop.ReasoningDelta); !ok {
		p.rs.end()
	}
	switch ev := ev.(type) {
	case *loop.ReasoningDelta:
		p.rs.write(ev.Text)
	case *loop.TextDelta:
		p.final.WriteString(ev.Text)
		if !p.asJSON && !p.schema {
			io.WriteString(c.stdout, safe(ev.Text))
			p.wroteText = true
		}
	case *loop.Retry:
		// The reply starts over: what was shown of it is void, and the
		// retry line says so (it cannot be taken back off the screen).
		p.final.Reset()
		void := ""
		if p.wroteText {
			void = "; the partial reply above is discarded"
		}
		p.newline()
		st.retries++
		fmt.Fprintf(c.stderr, "agrun: %s, retrying in %s (%d/%d)%s\n", retryWhat(ev), roundWait(ev.Wait), ev.Attempt, ev.Max, void)
	case *loop.StructuredOutput:
		p.final.Reset()
		p.final.Write(ev.Output)
		switch {
		case p.asJSON:
		case ev.Valid:
			fmt.Fprintf(c.stdout, "%s\n", safe(string(ev.Output)))
		case ev.Retry:
			fmt.Fprintf(c.stderr, "agrun: the answer does not match the schema (%s); asking again\n", safe(textsafe.Truncate(ev.Error, 300)))
		}
	case *loop.TurnComplete:
		st.requests++
		st.usage = st.usage.Add(ev.Usage)
		p.lastReason = ev.Reason
		if ev.Reason == "tool_calls" {
			p.final.Reset()
			p.newline()
		}
	case *loop.ToolExecutionStarted:
		st.toolCalls++
		p.prog.start(ev.ID, ev.Name)
		p.inputs[ev.ID] = ev.Input
	case *loop.ToolExecutionCompleted:
		p.prog.done(ev.ID)
		in, ran := p.inputs[ev.ID]
		delete(p.inputs, ev.ID)
		if p.asJSON {
			break
		}
		// One line per call: name, arguments, outcome, duration; a call
		// that did not run (over a budget, an unknown tool, a stopped
		// run) says why instead.
		if !ran {
			args := ""
			if len(ev.Input) > 0 {
				args = " " + safe(textsafe.Truncate(compact(ev.Input), 60))
			}
			fmt.Fprintf(c.stderr, "agrun: %s%s → %s\n", safe(ev.Name), args, outcome(ev))
			break
		}
		fmt.Fprintf(c.stderr, "agrun: %s %s → %s (%s)\n", safe(ev.Name), safe(textsafe.Truncate(compact(in), 60)),
			outcome(ev), ev.Duration.Round(time.Millisecond))
	}
}

// end finishes the output of a turn that ended with err (nil: it
// answered) and its stats.
func (p *printer) end(err error) {
	p.prog.stop()
	p.rs.end()
	p.newline()
	p.st.text, p.st.elapsed = p.final.String(), time.Since(p.st.start)
	if err == nil && p.lastReason == "length" {
		p.st.truncated = true
		fmt.Fprintln(p.c.stderr, `agrun: warning: the answer was cut off at the model's output limit (finish_reason "length")`)
	}
}

// stop stops the progress lines (end does too; stop is for a turn that
// never reached end).
func (p *printer) stop() { p.prog.stop() }

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
	parts = append(parts, s.usage.String(), s.elapsed.Round(100*time.Millisecond).String())
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

// outcome is a completed call's result, or its error's kind and message
// ("not run" for a call the loop answered itself, whose message begins
// so), each cut to fit a line.
func outcome(ev *loop.ToolExecutionCompleted) string {
	if !ev.IsError {
		return "ok " + safe(textsafe.Truncate(compact(ev.Output), 60))
	}
	var msg string
	if json.Unmarshal(ev.Output, &msg) != nil {
		msg = string(ev.Output)
	}
	if rest, ok := strings.CutPrefix(msg, "not run: "); ok {
		return "not run (" + string(ev.ErrorKind) + "): " + safe(textsafe.Truncate(rest, 120))
	}
	return "error (" + string(ev.ErrorKind) + "): " + safe(textsafe.Truncate(msg, 120))
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

// maxSchemaFile bounds a --schema file (the registry caps a schema at 64 KiB).
const maxSchemaFile = 1 << 20

// readSchema is the value of --schema: inline JSON (it starts with "{"),
// or the path of a JSON file. It must be JSON; the loop checks it is a
// schema.
func readSchema(arg string) (json.RawMessage, error) {
	data := []byte(arg)
	if !strings.HasPrefix(strings.TrimSpace(arg), "{") {
		f, err := os.Open(arg)
		if err != nil {
			return nil, usagef("--schema: %v", err)
		}
		defer f.Close()
		data, err = io.ReadAll(io.LimitReader(f, maxSchemaFile+1))
		if err != nil {
			return nil, usagef("--schema: %v", err)
		}
		if len(data) > maxSchemaFile {
			return nil, usagef("--schema: %s is larger than %d bytes", arg, maxSchemaFile)
		}
	}
	if !json.Valid(data) {
		return nil, usagef("--schema: not JSON (give a JSON Schema inline or the path of a .json file)")
	}
	return data, nil
}
