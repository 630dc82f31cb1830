package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// version is agrun's version as servers announce it (mcp serve): the
// module version of the build, e.g. "v1.2.0" or a pseudo-version
// "v0.0.0-20260101120000-abcdef123456+dirty" when built from a checkout.
var version = buildVersion(debug.ReadBuildInfo())

// buildVersion is the main module's version from the build info, else
// "(devel)" (go run and go test builds carry no version).
func buildVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi.Main.Version == "" {
		return "(devel)"
	}
	return bi.Main.Version
}

// versionText is what `agrun version` prints: agrun's module version,
// its VCS revision (with the commit time, and "modified" if the tree had
// uncommitted changes), the Go version and platform, and wazero's
// version, each from the binary's build info. A binary built without VCS
// information (go run, go test, -buildvcs=false) says so.
func versionText(bi *debug.BuildInfo, ok bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "agrun %s\n", buildVersion(bi, ok))
	rev, when, modified := "", "", false
	wazero := "unknown"
	goVersion := runtime.Version()
	if ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
					when = t.UTC().Format(time.DateTime) + " UTC"
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				wazero = d.Version
				if d.Replace != nil {
					wazero = d.Version + " => " + d.Replace.Path + " " + d.Replace.Version
				}
			}
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
	}
	switch {
	case rev == "":
		b.WriteString("  revision  unknown (built without VCS information: go run, go test, -buildvcs=false or a git worktree)\n")
	default:
		fmt.Fprintf(&b, "  revision  %s", rev)
		if when != "" {
			fmt.Fprintf(&b, " (%s)", when)
		}
		if modified {
			b.WriteString(" modified")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  go        %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "  wazero    %s\n", strings.TrimSpace(wazero))
	if clusterSupport {
		fmt.Fprintf(&b, "  cluster   built in (-tags cluster)\n")
	} else {
		fmt.Fprintf(&b, "  cluster   not built in (go build, or go install, -tags cluster ./cmd/agrun)\n")
	}
	return b.String()
}

// version is `agrun version`.
func (c *cli) version(args []string) error {
	fs := newFlags("version")
	pos, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageOf(fs, "takes no arguments")
	}
	c.printVersion()
	return nil
}

// printVersion prints what `agrun version` prints.
func (c *cli) printVersion() {
	fmt.Fprint(c.stdout, versionText(debug.ReadBuildInfo()))
}
