package main

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/cli/clilog"
)

// setLogLevel applies the global -v and --log-level.
func (c *cli) setLogLevel(level string, verbose bool) error {
	l, err := parseLogLevel(level)
	if verbose {
		l, err = slog.LevelDebug, nil
	}
	c.logLevel = l
	return err
}

// parseLogLevel reads --log-level's value (clilog.ParseLevel); a bad
// one is a usage error.
func parseLogLevel(s string) (slog.Level, error) {
	l, err := clilog.ParseLevel(s)
	if err != nil {
		return 0, usagef("%v", err)
	}
	return l, nil
}

// logger is the command's log: records at the level -v / --log-level
// chose (default warn) as one line each on stderr (clilog).
func (c *cli) logger() *slog.Logger { return slog.New(clilog.NewHandler(c.stderr, c.logLevel)) }

// noticeAfter is how long a wait may stay silent before slowNotice speaks.
var noticeAfter = 2 * time.Second

// slowNotice prints "agrun: msg" on stderr once, if stderr is a terminal
// and stop is not called within noticeAfter: a wait a person would
// otherwise sit through in silence (the first compile of the tools).
// On a pipe or a file it prints nothing: scripts keep their stderr.
func (c *cli) slowNotice(msg string) (stop func()) {
	if !c.isTTY(c.stderr) {
		return func() {}
	}
	done := make(chan struct{})
	var once sync.Once
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTimer(noticeAfter)
		defer t.Stop()
		select {
		case <-t.C:
			fmt.Fprintf(c.stderr, "agrun: %s\n", msg)
		case <-done:
		}
	}()
	return func() {
		once.Do(func() { close(done) })
		<-finished // the line, if any, is written before what follows
	}
}
