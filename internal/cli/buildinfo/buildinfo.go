// Package buildinfo reads what a binary knows of its own build (the
// module version, the VCS revision, the Go version, wazero's version)
// from runtime/debug's build info, for `agrun version` and the version
// agrun announces as a server (mcp serve).
//
//	bi, ok := debug.ReadBuildInfo()
//	fmt.Print(buildinfo.Text(bi, ok, false))
package buildinfo

import (
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Version is the main module's version from the build info, e.g.
// "v1.2.0", or a pseudo-version "v0.0.0-20260101120000-abcdef123456+dirty"
// when built from a checkout; "(devel)" when there is none (go run and
// go test builds carry no version, and ok false means no build info).
func Version(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi.Main.Version == "" {
		return "(devel)"
	}
	return bi.Main.Version
}

// Text is what `agrun version` prints: agrun's module version, its VCS
// revision (with the commit time, and "modified" if the tree had
// uncommitted changes), the Go version and platform, wazero's version
// (and its replacement, if go.mod replaces it), each from the build
// info, and whether the cluster is built in (cluster: built with -tags
// cluster). A binary built without VCS information (go run, go test,
// -buildvcs=false) says so.
func Text(bi *debug.BuildInfo, ok bool, cluster bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "agrun %s\n", Version(bi, ok))
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
				switch r := d.Replace; {
				case r == nil:
				case (r.Version == "" || r.Version == "(devel)") && (strings.HasPrefix(r.Path, ".") || filepath.IsAbs(r.Path)):
					// agrun's own patched copy (docs/RATIONALE.md, "wazero,
					// patched"): the release it is, then that it is patched.
					wazero = d.Version + " (patched: " + filepath.ToSlash(r.Path) + ")"
				default:
					wazero = d.Version + " => " + r.Path + " " + r.Version
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
	if cluster {
		fmt.Fprintf(&b, "  cluster   built in (-tags cluster)\n")
	} else {
		fmt.Fprintf(&b, "  cluster   not built in (go build, or go install, -tags cluster ./cmd/agrun)\n")
	}
	return b.String()
}
