package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// Help: every command answers -h/--help with its usage on stdout (exit 0),
// and a flag error with the error and its usage on stderr (exit 2). The
// usage is made when it is printed, from the command's own FlagSet (the
// one newFlags returned and parseFlags parsed), so a flag added to a
// command is in its help with no other change; the words around the flags
// (synopsis, description, example) are the command's entry in cmdDocs,
// found by the FlagSet's name ("run", "sessions show", "mcp serve").
//
// To give a flag a second name (-m and --model), define it once and call
// alias: the help shows both names on one line.

// cmdDoc is the text of one command's help, around its flags.
type cmdDoc struct {
	synopsis string // after "Usage: "; several lines allowed
	summary  string // one line: the command list of `agrun -h`, and the help's first line
	detail   string // optional paragraphs after the summary
	example  string // one or more example lines
}

// cmdDocs holds the help of every command, by FlagSet name. A command
// without an entry still gets a usage (its name and flags);
// TestEveryCommandHasHelp checks that every command has one.
var cmdDocs = map[string]cmdDoc{
	"agrun": {
		synopsis: "agrun [-c FILE] COMMAND [FLAGS] [ARGS]",
		summary:  "agrun runs LLM tools safely: WebAssembly tools in a sandbox, MCP servers, and the model loop that calls them.",
		detail: "The config is -c FILE (or --config FILE), else $AGRUN_CONFIG, else ./agrun.toml. Global flags go before or after the\n" +
			"command (after run and chat, -c is their --continue: name the config there with --config FILE).\n" +
			"Results go to stdout, diagnostics to stderr.\n" +
			"Exit codes: 0 success, 1 tool or run failure, 2 usage or configuration error, 3 run --json waits for approvals, 130 interrupted.\n" +
			"`agrun help COMMAND` or `agrun COMMAND -h` shows a command's flags.",
		example: `agrun call word_count '{"text":"to be or not to be"}'`,
	},
	"run": {
		synopsis: "agrun [-c FILE] run [FLAGS] PROMPT...\n       agrun [-c FILE] run [FLAGS] -          (the prompt from stdin)",
		summary:  "Send one prompt to the model, with the tools; stream the answer.",
		detail: "The session is saved (its id on stderr); --session or -c continues one.\n" +
			"With no PROMPT and stdin not a terminal, stdin is the prompt; with a PROMPT, piped stdin is appended\n" +
			"to it as context (at most 1 MiB; a longer input is cut, and stderr says so). A stdin that never\n" +
			"ends (a pipe left open by a parent process) blocks the run: give it < /dev/null.\n" +
			"-m, -s, --max-turns and --base-url override [llm] for this run only.",
		example: "agrun run -m gpt-4.1-mini \"How many words are in 'to be or not to be'?\"\n" +
			"  git diff | agrun run --no-tools \"Review this change\"\n" +
			"  agrun run -c \"And in French?\"",
	},
	"chat": {
		synopsis: "agrun [-c FILE] chat [FLAGS]",
		summary:  "Talk with the model interactively; the session is saved and resumable.",
		detail: "Lines from stdin (a terminal or a pipe) are prompts; /tools, /history, /new and /exit are commands.\n" +
			"Ctrl-C cancels the running turn; Ctrl-C at the prompt, /exit or end of input ends the chat.",
		example: "agrun chat --session demo",
	},
	"tools": {
		synopsis: "agrun [-c FILE] tools [--json]",
		summary:  "List the configured tools: name, source, permissions, and whether they can run.",
		example:  "agrun tools --json",
	},
	"call": {
		synopsis: "agrun [-c FILE] call [--json] NAME [ARGS_JSON]\n       agrun call [--json] [--allow-host H]... [--mount HOST:GUEST[:MODE]]... [--timeout D] [--memory S] [--manifest FILE] FILE.wasm [ARGS_JSON]",
		summary:  "Run one tool directly, without a model (ARGS_JSON from stdin if omitted): a configured tool by name, or a .wasm file with exactly the grants given as flags.",
		detail:   "An argument with a / or ending in .wasm is a file. A file's grant flags also allow the permissions they need for that call.",
		example:  `agrun call --json sum_c '{"numbers":[1,2,3]}'` + "\n  agrun call ./testdata/read_file.wasm '{\"path\":\"/docs/API.md\"}' --mount ./docs:/docs:ro",
	},
	"init": {
		synopsis: "agrun init [FILE]",
		summary:  "Write a commented agrun.toml (or FILE) to start from; an existing file is never overwritten.",
		example:  "agrun init && agrun tools",
	},
	"sessions": {
		synopsis: "agrun [-c FILE] sessions [--json]\n       agrun [-c FILE] sessions show|rm|export|prune|compact [FLAGS] ...",
		summary:  "List saved sessions (most recently used first), or show, remove, export, prune and compact them.",
		detail: "Turns are user prompts; tokens are the total the model reported.\n" +
			"Subcommands: show ID, rm ID..., export ID, prune --older-than AGE, compact ID (`agrun help sessions show`).",
		example: "agrun sessions",
	},
	"approvals": {
		synopsis: "agrun [-c FILE] approvals [list|revoke] [FLAGS] ...",
		summary:  "List the standing approvals (tools answered [a] always), or revoke them.",
		detail: "A standing approval holds for the grant it was given for: a tool whose grant changed is asked about again.\n" +
			"The file is approvals.json in the sessions folder. Subcommands: list [--json], revoke TOOL...",
		example: "agrun approvals revoke write_note",
	},
	"approvals list": {
		synopsis: "agrun [-c FILE] approvals list [--json]",
		summary:  "List the standing approvals: tool, when, by whom, and the grant they hold for.",
		example:  "agrun approvals list --json",
	},
	"approvals revoke": {
		synopsis: "agrun [-c FILE] approvals revoke TOOL...",
		summary:  "Remove the standing approvals of tools: their calls are asked about again.",
		example:  "agrun approvals revoke write_note get_weather",
	},
	"sessions show": {
		synopsis: "agrun [-c FILE] sessions show [--json] ID",
		summary:  "Print one saved conversation, readable; --json prints its raw records.",
		example:  "agrun sessions show 20260101-120000-1a2b3c4d",
	},
	"sessions rm": {
		synopsis: "agrun [-c FILE] sessions rm ID...",
		summary:  "Remove saved sessions. A session in use by another agrun is refused.",
		example:  "agrun sessions rm demo old-1",
	},
	"sessions export": {
		synopsis: "agrun [-c FILE] sessions export [--format json|markdown] ID",
		summary:  "Write one session to stdout as Markdown or as one JSON document.",
		example:  "agrun sessions export --format markdown demo > demo.md",
	},
	"sessions prune": {
		synopsis: "agrun [-c FILE] sessions prune --older-than AGE",
		summary:  "Remove the sessions last used more than AGE ago (30d, 12h, 90m) and name each one.",
		detail:   "Sessions in use by another agrun are skipped, and named.",
		example:  "agrun sessions prune --older-than 30d",
	},
	"sessions compact": {
		synopsis: "agrun [-c FILE] sessions compact [--keep N] [--json] ID",
		summary:  "Shrink a saved session, atomically: in every turn but the last N, tool results over 1 KiB become notes naming the call and its size.",
		detail:   "Every message (and every request record) stays, so the session resumes as before. Refused while another agrun uses the session.",
		example:  "agrun sessions compact --keep 2 demo",
	},
	"audit": {
		synopsis: "agrun [-c FILE] audit [--tenant NAME] [--session ID] [--tool NAME] [--since AGE] [--json]",
		summary:  "Compare each WebAssembly tool's grant with what its recorded calls did, and suggest a smaller [tools.NAME] block.",
		detail: "Reads the call records that run, chat and serve's runs save in the sessions: mounts never touched,\n" +
			"rw mounts only read (-> ro), hosts never contacted, time, memory and output limits against the largest\n" +
			"observed (with headroom). A suggestion is only as good as the calls recorded: a rarely used path or host\n" +
			"may be missing. It never widens a grant; refusals and limits hit are notes. --tenant reads the runs\n" +
			"agrun serve keeps for that tenant in [serve] data_dir, and only that tenant's records.",
		example: "agrun audit --since 7d\n  agrun audit --tool read_file --json\n  agrun audit --tenant acme --json",
	},
	"inspect": {
		synopsis: "agrun inspect [--json] FILE.wasm",
		summary:  "Show a module's manifest, sha256, size, imports and exports.",
		example:  "agrun inspect testdata/get_weather.wasm",
	},
	"pack": {
		synopsis: "agrun pack -m MANIFEST IN.wasm -o OUT.wasm",
		summary:  "Embed a manifest (TOML or JSON) in a module.",
		example:  "agrun pack -m manifest.toml tool.wasm -o tool.packed.wasm",
	},
	"pull": {
		synopsis: "agrun [-c FILE] pull [--json] REF",
		summary:  "Fetch a tool from an OCI registry into the local module store; print its digest and the line to write.",
		detail: "REF is HOST/REPO:TAG or HOST/REPO@sha256:DIGEST. A tag is resolved once: write the pinned line it prints\n" +
			"(oci = \"HOST/REPO:TAG@sha256:...\") in [tools.NAME]; that tool then loads from the store ([oci] dir), offline.\n" +
			"Accepted: one wasm layer (agrun's, the CNCF Wasm artifact's, application/wasm) or a hyper-mcp plug-in image.\n" +
			"HTTPS, except to loopback or a [registries.\"HOST:PORT\"] marked insecure = true; credentials from\n" +
			"[registries.\"HOST\"] username_env / password_env, else the Docker config file.\n" +
			"The manifest's signatures (cosign's sha256-<digest>.sig tag, sigstore bundle referrers) are kept with it;\n" +
			"[trust] require_signature checks them against [trust] keys each time the tool loads, offline.",
		example: "agrun pull ghcr.io/acme/word_count:1.0",
	},
	"push": {
		synopsis: "agrun [-c FILE] push [--json] [--sign KEY] FILE.wasm REF",
		summary:  "Publish a module to an OCI registry at REF (HOST/REPO:TAG); print its digest and the line to write.",
		detail: "The artifact has agrun's artifact type and one layer of application/vnd.agrun.tool.v1+wasm.\n" +
			"--sign KEY signs the pushed digest as `cosign sign --key KEY` does (cosign's sha256-<digest>.sig tag), with\n" +
			"cosign's private key file (its password from $COSIGN_PASSWORD); [trust] keys = [\"cosign.pub\"] verifies it.",
		example: "agrun push testdata/word_count.wasm ghcr.io/acme/word_count:1.0",
	},
	"serve": {
		synopsis: "agrun [-c FILE] serve [--addr ADDR]",
		summary:  "Serve the HTTP API: upload, list and call tools; runs (docs/API.md).",
		detail: "With [cluster] it keeps no state: uploads go to [cluster] module_store, shared by every replica\n" +
			"(run as many as you like behind a load balancer); runs answer 501 there (docs/API.md, \"Cluster mode\").",
		example: "agrun serve --addr 127.0.0.1:8080",
	},
	"worker": {
		synopsis: "agrun [-c FILE] worker [--queues llm,wasm,mcp] [--concurrency N] [--identity NAME]",
		summary:  "Serve a cluster's session workflows and activities (model requests, WASM and MCP tool calls) on Temporal.",
		detail: "Needs [cluster] temporal_address; the tools, policy and sandbox are the config's, as for the local path.\n" +
			"Every worker runs session workflows; --queues chooses the activity queues. SIGINT or SIGTERM stops it;\n" +
			"its running activities go to another worker after [cluster] heartbeat_timeout (docs/SCALING.md).",
		example: "agrun worker --queues wasm --concurrency 4",
	},
	"mcp": {
		synopsis: "agrun [-c FILE] mcp serve|login ...",
		summary:  "The tools as an MCP server (`agrun help mcp serve`); OAuth for an MCP server (`agrun help mcp login`).",
		example:  "agrun mcp serve",
	},
	"mcp login": {
		synopsis: "agrun [-c FILE] mcp login [--timeout D] NAME",
		summary:  "Authorize agrun with OAuth for the streamable-HTTP server [mcp.NAME] (oauth = {...}): open the URL it prints in a browser.",
		detail: "The tokens are kept in the user's config directory (agrun/mcp-tokens/, 0600), never in agrun.toml, and refreshed by agrun;\n" +
			"runs, tools and calls use them without a browser. agrun opens no browser itself: the URL comes from the server.",
		example: "agrun mcp login github",
	},
	"mcp serve": {
		synopsis: "agrun [-c FILE] mcp serve [--http ADDR [--max-sessions N] [--max-sessions-per-client N]]",
		summary:  "Serve every tool, sandboxed, to MCP clients: over stdio, or streamable HTTP at /mcp.",
		example:  "agrun mcp serve --http 127.0.0.1:8081",
	},
	"version": {
		synopsis: "agrun version",
		summary:  "Print agrun's version and VCS revision, the Go version and wazero's version.",
		example:  "agrun version",
	},
	"help": {
		synopsis: "agrun help [COMMAND [SUBCOMMAND]]",
		summary:  "Show the usage of agrun or of one command.",
		example:  "agrun help sessions prune",
	},
}

// alias gives the flag named name a second name, sharing its value: one
// line in the help ("-m, --model"). name must be defined.
func alias(fs *flag.FlagSet, name, other string) {
	f := fs.Lookup(name)
	fs.Var(f.Value, other, f.Usage)
}

// helpRequest is parseFlags' error for -h/--help: the caller prints the
// FlagSet's usage on stdout and exits 0 (cli.exit does).
// With version set it is --version after a command: the version is
// printed instead.
type helpRequest struct {
	fs      *flag.FlagSet
	version bool
}

func (h *helpRequest) Error() string { return h.fs.Name() + ": help requested" }

// usageOf is a usage error of the command fs parses: cli.exit prints the
// message, then that command's usage.
func usageOf(fs *flag.FlagSet, format string, args ...any) error {
	return &usageError{msg: fs.Name() + ": " + fmt.Sprintf(format, args...), fs: fs}
}

// synopsis is the one-line usage of the command fs parses.
func synopsis(fs *flag.FlagSet) string {
	if d, ok := cmdDocs[fs.Name()]; ok && d.synopsis != "" {
		return d.synopsis
	}
	return "agrun " + fs.Name() + " [FLAGS]"
}

// helpText is the usage of the command fs parses: synopsis, what it does,
// its flags with their defaults (from fs), and an example.
func helpText(fs *flag.FlagSet) string {
	d := cmdDocs[fs.Name()]
	d.synopsis = synopsis(fs)
	var b strings.Builder
	if d.summary != "" {
		fmt.Fprintf(&b, "%s\n\n", d.summary)
	}
	fmt.Fprintf(&b, "Usage: %s\n", d.synopsis)
	if d.detail != "" {
		fmt.Fprintf(&b, "\n%s\n", d.detail)
	}
	if fl := flagLines(fs); fl != "" {
		fmt.Fprintf(&b, "\nFlags:\n%s", fl)
	}
	if g := globalLine(fs); g != "" {
		fmt.Fprintf(&b, "\nGlobal flags (before or after the command): %s\n", g)
	}
	if fs.Name() == "agrun" {
		b.WriteString("\nCommands:\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		for _, cmd := range commands {
			fmt.Fprintf(tw, "  %s\t%s\n", cmd.name, cmdDocs[cmd.name].summary)
		}
		tw.Flush()
	}
	if d.example != "" {
		fmt.Fprintf(&b, "\nExample:\n  %s\n", d.example)
	}
	return b.String()
}

// globalLine names the global flags a command's fs takes (all but those
// it defines itself: run's -c is --continue), "" for agrun's own.
func globalLine(fs *flag.FlagSet) string {
	if fs.Name() == "agrun" {
		return ""
	}
	var names []string
	var last flag.Value
	(&cli{}).globalFlagSet().VisitAll(func(f *flag.Flag) {
		if own := fs.Lookup(f.Name); own != nil {
			if _, ok := own.Value.(globalValue); !ok {
				return
			}
		}
		n := "--" + f.Name
		if len(f.Name) == 1 {
			n = "-" + f.Name
		}
		if arg, _ := flag.UnquoteUsage(f); arg != "" {
			n += " " + arg
		}
		if f.Value == last { // -c, --config: "-c/--config FILE"
			prev := names[len(names)-1]
			names[len(names)-1] = prev[:strings.IndexByte(prev+" ", ' ')] + "/" + n
		} else {
			names = append(names, n)
		}
		last = f.Value
	})
	return strings.Join(names, ", ")
}

// flagLines renders fs's flags, one line per flag with its other names:
// "  -m, --model NAME   the model (default ...)".
func flagLines(fs *flag.FlagSet) string {
	type group struct {
		names []string
		f     *flag.Flag
	}
	var groups []*group
	byValue := map[flag.Value]*group{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(globalValue); ok {
			return // globalLine names them
		}
		if g, ok := byValue[f.Value]; ok {
			g.names = append(g.names, f.Name)
			return
		}
		g := &group{names: []string{f.Name}, f: f}
		byValue[f.Value] = g
		groups = append(groups, g)
	})
	if len(groups) == 0 {
		return ""
	}
	long := func(g *group) string {
		return slices.MaxFunc(g.names, func(a, b string) int { return len(a) - len(b) })
	}
	slices.SortFunc(groups, func(a, b *group) int { return strings.Compare(long(a), long(b)) })
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	for _, g := range groups {
		slices.SortFunc(g.names, func(a, b string) int { return len(a) - len(b) })
		var names []string
		for _, n := range g.names {
			if len(n) == 1 {
				names = append(names, "-"+n)
			} else {
				names = append(names, "--"+n)
			}
		}
		left := strings.Join(names, ", ")
		if len(g.names[0]) > 1 {
			left = "    " + left // long names line up under the short ones
		}
		arg, usage := flag.UnquoteUsage(g.f)
		if arg != "" {
			left += " " + arg
		}
		if def := g.f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" && def != "[]" {
			if fmt.Sprintf("%T", g.f.Value) == "*flag.stringValue" {
				usage += fmt.Sprintf(" (default %q)", def)
			} else {
				usage += fmt.Sprintf(" (default %s)", def)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\n", left, usage)
	}
	tw.Flush()
	return b.String()
}
