// Command agrun runs LLM tools safely: WebAssembly tools in a sandbox, MCP
// servers, and the model loop that calls them.
//
//	agrun [-c agrun.toml] run [--json] [--session ID] PROMPT
//	agrun [-c agrun.toml] chat [--session ID]
//	agrun [-c agrun.toml] tools [--json]
//	agrun [-c agrun.toml] call [--json] NAME [ARGS_JSON]
//	agrun [-c agrun.toml] sessions [--json] | sessions show ID
//	agrun [-c agrun.toml] call [--allow-host H] [--mount H:G[:MODE]] [--timeout D] [--memory S] FILE.wasm [ARGS_JSON]
//	agrun init [FILE]
//	agrun inspect FILE.wasm
//	agrun pack -m MANIFEST IN.wasm -o OUT.wasm
//	agrun [-c agrun.toml] serve [--addr ADDR]
//	agrun [-c agrun.toml] mcp serve [--http ADDR]
//	agrun version
//
// Exit codes: 0 success, 1 a tool or run failure, 2 a usage or
// configuration error. Results go to stdout, diagnostics to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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

const usage = `agrun runs LLM tools safely.

Usage:
  agrun [-c FILE] run [--json] [--session ID] PROMPT   one prompt, streamed
  agrun [-c FILE] chat [--session ID]                  interactive session
  agrun [-c FILE] tools [--json]                       registered tools
  agrun [-c FILE] call [--json] NAME [ARGS_JSON]       run one tool (ARGS from stdin if omitted)
  agrun [-c FILE] sessions [--json]                    saved sessions
  agrun [-c FILE] sessions show ID                     one saved session
  agrun [-c FILE] call [flags] FILE.wasm [ARGS_JSON]   run a .wasm file with the grants given as flags
  agrun init [FILE]                                    write a commented agrun.toml (never overwrites)
  agrun inspect FILE.wasm                              a module's manifest, hash, imports, exports
  agrun pack -m MANIFEST IN.wasm -o OUT.wasm           embed a manifest (TOML or JSON)
  agrun [-c FILE] serve [--addr ADDR]                  HTTP API for uploading and calling tools
  agrun [-c FILE] mcp serve [--http ADDR]              the tools as an MCP server (stdio or HTTP)
  agrun version

Global flags (before the command): -c FILE; -v or --log-level debug|info|warn|error.
The config is -c FILE, else $AGRUN_CONFIG, else ./agrun.toml.
Exit codes: 0 success, 1 tool or run failure, 2 usage or configuration error.
`

// errUsage marks errors that are the user's invocation's fault (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// cli is one invocation of the command: its streams and global options.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	configPath     string
	logLevel       slog.Level // -v, --log-level: what reaches stderr (default warn)
	// interrupts delivers Ctrl-C. chat uses it to cancel a turn; every
	// other command cancels its context on the first one. Nil in tests.
	interrupts <-chan os.Signal
}

// run is the whole command, testable with buffers: it returns the exit
// code. Cancelling ctx is what a Ctrl-C does.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	return c.main(ctx, args)
}

func (c *cli) main(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("agrun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.configPath, "c", "", "config file")
	verbose := fs.Bool("v", false, "verbose: same as --log-level debug")
	level := fs.String("log-level", "warn", "what is logged on stderr: debug, info, warn or error (guest logs are info and debug)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, usage)
			return exitOK
		}
		fmt.Fprintf(c.stderr, "agrun: %v\n\n%s", err, usage)
		return exitUsage
	}
	if err := c.setLogLevel(*level, *verbose); err != nil {
		fmt.Fprintf(c.stderr, "agrun: %v\n", err)
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(c.stderr, usage)
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
	var err error
	switch cmd {
	case "call":
		return c.call(ctx, rest)
	case "tools":
		err = c.tools(ctx, rest)
	case "init":
		err = c.initConfig(rest)
	case "inspect":
		err = c.inspect(rest)
	case "pack":
		err = c.pack(rest)
	case "run":
		return c.runPrompt(ctx, rest)
	case "chat":
		err = c.chat(ctx, rest)
	case "sessions":
		err = c.sessions(rest)
	case "serve":
		err = c.serve(ctx, rest)
	case "mcp":
		err = c.mcpServe(ctx, rest)
	case "version", "--version", "-version":
		fmt.Fprintf(c.stdout, "agrun %s\n", version)
	case "help", "-h", "--help":
		fmt.Fprint(c.stdout, usage)
	default:
		err = usagef("unknown command %q", cmd)
	}
	return c.exit(err)
}

// exit reports err on stderr and returns its exit code.
func (c *cli) exit(err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(c.stderr, "agrun: %s\n", safe(err.Error()))
	if isUsage(err) {
		return exitUsage
	}
	return exitFailure
}

// isUsage reports whether err should exit with code 2.
func isUsage(err error) bool {
	var u *usageError
	var ce *configError
	return errors.As(err, &u) || errors.As(err, &ce)
}

// newFlags returns a FlagSet for a subcommand that reports errors as
// usage errors.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args, allowing flags after positional arguments
// ("call NAME --json").
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%s: %v", fs.Name(), err)
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
