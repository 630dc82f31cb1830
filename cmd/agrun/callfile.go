package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/runtime"
)

// `agrun call FILE.wasm`: a module run with no config entry.
//
// An argument is a file, not a tool name, when it contains a path
// separator or ends in ".wasm": tool names match ^[a-zA-Z0-9_-]{1,64}$, so
// no name looks like a file (call ./x.wasm, dir/x.wasm or x.wasm).
//
// The tool gets exactly the grants given as flags — nothing by default: no
// hosts, no mounts — and its manifest from the module (or --manifest).
// The config, if one is found, supplies the rest ([sandbox]: cache, limits
// not given as flags; [permissions]); without one the defaults apply:
// policy allowed = ["read", "network"], denied = ["delete", "shell"],
// allow_unspecified = true. A grant on the command line is the operator's
// consent for this call: the permissions it needs (--allow-host: network;
// --mount: filesystem and read, rw: write, rwd: write and delete) are
// allowed for it, even if the policy denies them. The call then takes the
// registry's path: permission check, schema validation, execution.

// isFile reports whether call's argument names a .wasm file.
func isFile(arg string) bool {
	return strings.ContainsRune(arg, '/') || strings.ContainsRune(arg, filepath.Separator) || strings.HasSuffix(arg, ".wasm")
}

// fileGrant is what the flags of `call FILE.wasm` grant.
type fileGrant struct {
	hosts    stringList
	private  bool
	mounts   mountList
	timeout  durationFlag
	memory   sizeFlag
	manifest string
	set      []string // the grant flags given, for the error when NAME is not a file
}

// flagsSet lists the FILE-only flags that were given.
func flagsSet(fs *flag.FlagSet) []string {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		// Output flags and the global ones (-c FILE, -v) are for every call.
		_, global := f.Value.(globalValue)
		if f.Name != "json" && f.Name != "audit" && !global {
			set = append(set, "--"+f.Name)
		}
	})
	return set
}

// openFileEnv builds the env of one file (setup.OpenFile): the config's
// sandbox and policy (or the defaults), no configured tool loaded, and
// the file's tool registered under its manifest's name, which it
// returns.
func (c *cli) openFileEnv(ctx context.Context, path string, g fileGrant) (*env, string, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return nil, "", err
	}
	t := config.Tool{Wasm: path, Manifest: g.manifest, AllowedHosts: g.hosts, AllowPrivate: g.private, Timeout: g.timeout.Duration, Memory: g.memory.Size, Mounts: g.mounts}
	se, name, warnings, err := setup.OpenFile(ctx, cfg, c.logger(), t)
	if err != nil {
		return nil, "", err
	}
	e := wrapEnv(se)
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "agrun: warning: %s\n", safe(w))
	}
	return e, name, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// mountList is a repeatable HOST:GUEST[:MODE] flag.
type mountList []config.Mount

func (l *mountList) String() string {
	var s []string
	for _, m := range *l {
		s = append(s, m.String())
	}
	return strings.Join(s, ",")
}

func (l *mountList) Set(v string) error {
	var m config.Mount
	if err := m.UnmarshalText([]byte(v)); err != nil {
		return err
	}
	*l = append(*l, m)
	return nil
}

// durationFlag is a config.Duration flag ("5s").
type durationFlag struct{ config.Duration }

func (d *durationFlag) Set(v string) error { return d.UnmarshalText([]byte(v)) }
func (d *durationFlag) String() string {
	if d.Duration == 0 {
		return ""
	}
	return d.Std().String()
}

// sizeFlag is a config.Size flag ("32MiB").
type sizeFlag struct{ config.Size }

func (s *sizeFlag) Set(v string) error { return s.UnmarshalText([]byte(v)) }
func (s *sizeFlag) String() string {
	if s.Size == 0 {
		return ""
	}
	return runtime.FormatBytes(int64(s.Size))
}
