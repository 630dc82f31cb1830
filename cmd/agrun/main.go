// Command agrun runs LLM tools safely: WebAssembly tools in a sandbox, MCP
// servers, and the model loop that calls them.
//
//	agrun [-c agrun.toml] run [FLAGS] PROMPT...     (or - / piped stdin; --schema FILE.json for a JSON answer)
//	agrun [-c agrun.toml] chat [FLAGS]
//	agrun [-c agrun.toml] tools [--json]
//	agrun [-c agrun.toml] call [--json] NAME [ARGS_JSON]
//	agrun [-c agrun.toml] sessions [--json]
//	agrun [-c agrun.toml] sessions show|rm|export|prune|compact ...
//	agrun [-c agrun.toml] audit [--session ID] [--tool NAME] [--since AGE] [--json]
//	agrun [-c agrun.toml] call [--allow-host H] [--mount H:G[:MODE]] [--timeout D] [--memory S] FILE.wasm [ARGS_JSON]
//	agrun init [FILE]
//	agrun inspect FILE.wasm
//	agrun pack -m MANIFEST IN.wasm -o OUT.wasm
//	agrun [-c agrun.toml] pull [--json] REF
//	agrun [-c agrun.toml] push [--json] FILE.wasm REF
//	agrun [-c agrun.toml] serve [--addr ADDR]
//	agrun [-c agrun.toml] mcp serve [--http ADDR]
//	agrun version | --version
//	agrun help [COMMAND]
//
// The global flags (-c/--config FILE, -v, --log-level, --version) go
// before the command or after it; after run and chat, -c is --continue.
//
// Every command answers -h/--help with its usage (help.go renders it from
// the command's FlagSet); run and chat share their per-run flags
// (-m/--model, -s/--system, --max-turns, --base-url, -c/--continue,
// --session, --tools, --no-tools).
//
// Exit codes: 0 success, 1 a tool or run failure, 2 a usage or
// configuration error, 130 a run interrupted by Ctrl-C. Results go to
// stdout, diagnostics to stderr.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/agnivade/levenshtein"

	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/telemetry"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitInterrupted is a run stopped by Ctrl-C (128 + SIGINT, as shells do).
	exitInterrupted = 130
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	interrupts := make(chan os.Signal, 4)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				cancel()
				continue
			}
			interrupts <- s
		}
	}()
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, interrupts: interrupts}
	os.Exit(c.main(ctx, os.Args[1:]))
}

// errUsage marks errors that are the user's invocation's fault (exit 2).
// fs, if set, is the command whose usage follows the message.
type usageError struct {
	msg string
	fs  *flag.FlagSet
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// cli is one invocation of the command: its streams and global options.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	configPath     string
	logLevel       slog.Level // -v, --log-level: what reaches stderr (default warn)
	// The global flags' values besides -c (globalFlagSet): --version,
	// -v, --log-level.
	showVersion, verbose bool
	logLevelName         string
	// interrupts delivers Ctrl-C. chat uses it to cancel a turn; every
	// other command cancels its context on the first one. Nil in tests.
	interrupts <-chan os.Signal
	// showReasoning shows the model's reasoning deltas (run and chat
	// --show-reasoning).
	showReasoning bool
	// tel traces run and chat turns ([telemetry]); nil: off.
	tel *telemetry.Telemetry
	// lineIn answers approval questions (approvals.go): chat's line
	// reader, or stdin's once it is found to be a terminal. terminal, if
	// set, replaces isTerminal (tests drive the prompt with a fake one).
	lineIn   func(ctx context.Context) (string, error)
	inMu     sync.Mutex // guards lineIn
	terminal func(any) bool
	// asking is held for a whole exchange with the person at the
	// terminal (an approval, an MCP server's question): one at a time, so
	// that a line typed for one is never read as the answer to another.
	asking sync.Mutex
	// samp serves MCP servers' sampling requests with the [llm] model
	// (envFor makes it; sampling.go).
	samp *setup.Sampler
	// deferApprovals: run --json pauses calls that need a yes
	// (approval_required) instead of asking.
	deferApprovals bool
}

// run is the whole command, testable with buffers: it returns the exit
// code. Cancelling ctx is what a Ctrl-C does.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	return c.main(ctx, args)
}

// command is one subcommand of agrun: its name (its help is cmdDocs[name])
// and what runs it, returning the exit code.
type command struct {
	name string
	run  func(c *cli, ctx context.Context, args []string) int
}

// commands lists the subcommands in the order `agrun -h` shows them.
var commands []command

func init() {
	errs := func(f func(c *cli, ctx context.Context, args []string) error) func(*cli, context.Context, []string) int {
		return func(c *cli, ctx context.Context, args []string) int { return c.exit(f(c, ctx, args)) }
	}
	commands = []command{
		{"run", (*cli).runPrompt},
		{"chat", errs((*cli).chat)},
		{"tools", errs((*cli).tools)},
		{"call", (*cli).call},
		{"init", errs(func(c *cli, _ context.Context, args []string) error { return c.initConfig(args) })},
		{"sessions", errs(func(c *cli, _ context.Context, args []string) error { return c.sessions(args) })},
		{"audit", errs((*cli).audit)},
		{"approvals", errs(func(c *cli, _ context.Context, args []string) error { return c.approvals(args) })},
		{"inspect", errs(func(c *cli, _ context.Context, args []string) error { return c.inspect(args) })},
		{"pack", errs(func(c *cli, _ context.Context, args []string) error { return c.pack(args) })},
		{"pull", errs((*cli).pull)},
		{"push", errs((*cli).push)},
		{"serve", errs((*cli).serve)},
		{"mcp", errs((*cli).mcpServe)},
		{"worker", errs((*cli).worker)},
		{"version", errs(func(c *cli, _ context.Context, args []string) error { return c.version(args) })},
		{"help", errs((*cli).help)},
	}
}

func lookupCommand(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}

func (c *cli) main(ctx context.Context, args []string) int {
	fs := c.globalFlagSet()
	rest, err := c.parseLeading(fs, args)
	if err != nil {
		return c.exit(err)
	}
	if c.showVersion {
		c.printVersion()
		return exitOK
	}
	if len(rest) == 0 {
		fmt.Fprint(c.stderr, helpText(fs))
		return exitUsage
	}
	cmd, rest := rest[0], rest[1:]
	if cmd != "chat" && c.interrupts != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-c.interrupts:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	cm, ok := lookupCommand(cmd)
	if !ok {
		msg := fmt.Sprintf("unknown command %q", cmd)
		if near := nearestCommand(cmd); near != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", near)
		}
		return c.exit(&usageError{msg: msg, fs: fs})
	}
	return cm.run(c, ctx, rest)
}

// Global flags: -c/--config FILE, --version, -v and --log-level, set on
// c. They go before the command or anywhere after it (issue 32): every
// command's FlagSet gets those of them it does not define itself
// (c.parseFlags), so a command's own flag of the same name wins. The one
// such flag is run's and chat's -c, --continue there; --config FILE
// names the config anywhere.

// globalFlagSet is agrun's own FlagSet: the global flags, bound to c,
// their defaults the values c holds (so that defining them again for a
// command keeps what was given before it).
func (c *cli) globalFlagSet() *flag.FlagSet {
	fs := newFlags("agrun")
	fs.StringVar(&c.configPath, "c", c.configPath, "read the config from `FILE` (default $AGRUN_CONFIG, else ./agrun.toml)")
	alias(fs, "c", "config")
	fs.BoolVar(&c.showVersion, "version", c.showVersion, "print the version and exit (as: agrun version)")
	fs.BoolVar(&c.verbose, "v", c.verbose, "verbose: the same as --log-level debug")
	fs.StringVar(&c.logLevelName, "log-level", cmp.Or(c.logLevelName, "warn"), "what is logged on stderr: `LEVEL` debug, info, warn or error (guest logs are info and debug)")
	return fs
}

// globalValue is a global flag on a command's FlagSet: the command's
// help leaves it out of its flags and names the global flags in one
// line (help.go).
type globalValue struct{ flag.Value }

// IsBoolFlag tells the flag package that -v and --version take no value.
func (v globalValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// addGlobals defines on fs, a command's FlagSet, the global flags it
// does not define itself.
func (c *cli) addGlobals(fs *flag.FlagSet) {
	c.globalFlagSet().VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) == nil {
			fs.Var(globalValue{f.Value}, f.Name, f.Usage)
		}
	})
}

// applyGlobals puts the global flags into effect once fs, agrun's or a
// command's, has been parsed: the log level; --version after a command
// is a request for the version, as before it.
func (c *cli) applyGlobals(fs *flag.FlagSet) error {
	if err := c.setLogLevel(c.logLevelName, c.verbose); err != nil {
		return &usageError{msg: strings.TrimPrefix(fs.Name()+": ", "agrun: ") + err.Error(), fs: fs}
	}
	if c.showVersion && fs.Name() != "agrun" {
		return &helpRequest{fs: fs, version: true}
	}
	return nil
}

// parseLeading parses the flags before the first argument that is not
// one (agrun's before the command, mcp's before its subcommand), the
// global flags among them, and returns the arguments from there on.
func (c *cli) parseLeading(fs *flag.FlagSet, args []string) ([]string, error) {
	if fs.Name() != "agrun" {
		c.addGlobals(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &helpRequest{fs: fs}
		}
		msg := flagError(err, args)
		if fs.Name() != "agrun" {
			msg = fs.Name() + ": " + msg
		}
		return nil, &usageError{msg: msg, fs: fs}
	}
	if err := c.applyGlobals(fs); err != nil {
		return nil, err
	}
	return fs.Args(), nil
}

// help is `agrun help [COMMAND [SUBCOMMAND]]`: the usage that `COMMAND -h`
// prints.
func (c *cli) help(ctx context.Context, args []string) error {
	fs := newFlags("help")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fmt.Fprint(c.stdout, helpText((&cli{}).globalFlagSet()))
		return nil
	}
	cm, ok := lookupCommand(pos[0])
	if _, doc := cmdDocs[strings.Join(pos, " ")]; !ok || (len(pos) > 1 && !doc) {
		return usageOf(fs, "no command %q (agrun help lists them)", strings.Join(pos, " "))
	}
	if cm.name == "help" {
		fmt.Fprint(c.stdout, helpText(fs))
		return nil
	}
	if code := cm.run(c, ctx, append(pos[1:], "-h")); code != exitOK {
		return fmt.Errorf("help for %q failed", strings.Join(pos, " "))
	}
	return nil
}

// exit reports err on stderr and returns its exit code.
func (c *cli) exit(err error) int {
	if err == nil {
		return exitOK
	}
	var h *helpRequest
	if errors.As(err, &h) {
		if h.version {
			c.printVersion()
		} else {
			fmt.Fprint(c.stdout, helpText(h.fs))
		}
		return exitOK
	}
	fmt.Fprintf(c.stderr, "agrun: %s\n", safe(err.Error()))
	c.usageHint(err)
	if isUsage(err) {
		return exitUsage
	}
	return exitFailure
}

// usageHint prints, after a usage error's message, the synopsis of the
// command it is about (if it names one) and where its help is: two
// lines, so the error stays on screen (the whole help is -h's).
func (c *cli) usageHint(err error) {
	var u *usageError
	if errors.As(err, &u) && u.fs != nil {
		more := "`agrun help` lists the commands"
		if u.fs.Name() != "agrun" {
			more = "`agrun " + u.fs.Name() + " -h` shows its flags and an example"
		}
		fmt.Fprintf(c.stderr, "usage: %s\n%s\n", synopsis(u.fs), more)
	}
}

// nearestCommand is the command name closest to name: one or two edits
// away (a typo; agnivade/levenshtein counts runes, as a person sees
// them), else one that name begins ("sess"); "" if none is.
func nearestCommand(name string) string {
	best, bestD := "", 3
	for _, cm := range commands {
		if d := levenshtein.ComputeDistance(name, cm.name); d < bestD {
			best, bestD = cm.name, d
		}
	}
	if best != "" || len(name) < 2 {
		return best
	}
	for _, cm := range commands {
		if strings.HasPrefix(cm.name, name) {
			return cm.name
		}
	}
	return ""
}

// isHelp reports whether err is a request for help (-h): commands with
// their own output contract (--json) hand it to exit.
func isHelp(err error) bool {
	var h *helpRequest
	return errors.As(err, &h)
}

// isUsage reports whether err should exit with code 2.
func isUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u) || isConfigError(err)
}

// flagError is the flag package's error in the user's words: the flag as
// it was typed ("--bogus", where the package says "-bogus").
func flagError(err error, args []string) string {
	msg := err.Error()
	typed := func(name string) string {
		for _, a := range args {
			if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
				return "--" + name
			}
		}
		return "-" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag " + typed(name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return typed(name) + " needs a value"
	}
	if m := invalidFlagValue.FindStringSubmatch(msg); m != nil {
		why := m[4]
		switch {
		case m[1] != "":
			why = "want true or false"
		case why == "parse error":
			why = "want a number"
		case why == "value out of range":
			why = "the number is too large"
		case strings.HasPrefix(why, "time: "):
			why = "want a duration such as 30s, 2m or 1h"
		}
		return fmt.Sprintf("invalid value %s for %s: %s", m[2], typed(m[3]), why)
	}
	return msg
}

// invalidFlagValue matches package flag's "invalid value" errors:
// "boolean " for a bool flag, the value (quoted), the flag's name, why.
var invalidFlagValue = regexp.MustCompile(`^invalid (boolean )?value (".*") for (?:flag )?-([^:]+): (.*)$`)

// newFlags returns the FlagSet of a subcommand, named as its help is named
// in cmdDocs ("run", "sessions show"). Every command parses it with
// parseFlags, which turns -h/--help into its usage and a bad flag into a
// usage error followed by its usage (help.go).
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args, fs's flags and the global ones, allowing flags
// after positional arguments ("call NAME --json"). -h/--help is a
// *helpRequest (so is --version); any other flag error a usage error
// carrying fs, so that cli.exit prints the usage.
func (c *cli) parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	c.addGlobals(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := c.applyGlobals(fs); err != nil {
		return nil, err
	}
	return pos, nil
}

// parseArgs is parseFlags without the global flags.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpRequest{fs: fs}
			}
			return nil, &usageError{msg: fmt.Sprintf("%s: %s", fs.Name(), flagError(err, args)), fs: fs}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
