package main

import (
	"fmt"
	"runtime/debug"

	"github.com/agcore/agrun/internal/cli/buildinfo"
)

// version is agrun's version as servers announce it (mcp serve): the
// module version of the build (buildinfo.Version).
var version = buildinfo.Version(debug.ReadBuildInfo())

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
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprint(c.stdout, buildinfo.Text(bi, ok, clusterSupport))
}
