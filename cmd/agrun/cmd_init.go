package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/agcore/agrun/internal/cli/config"
)

// initConfig is `agrun init [FILE]`: write a commented agrun.toml (FILE,
// else -c FILE, else ./agrun.toml) to start from. It never overwrites a
// file: an existing one is a configuration error (exit 2).
func (c *cli) initConfig(args []string) error {
	fl := newFlags("init")
	pos, err := c.parseFlags(fl, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageOf(fl, "takes at most one FILE")
	}
	path := "agrun.toml"
	switch {
	case len(pos) == 1:
		path = pos[0]
	case c.configPath != "":
		path = c.configPath
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return &configError{fmt.Errorf("%s exists; not overwritten (remove it, or name another file: agrun init FILE)", path)}
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(config.Template); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "agrun: wrote %s: add your tools under [tools.NAME]; `agrun tools` lists them, docs/CONFIG.md explains every key\n", path)
	return nil
}
