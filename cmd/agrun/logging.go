package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
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

// parseLogLevel reads --log-level's value.
func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "", "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, usagef("--log-level %q: want debug, info, warn or error", s)
}

// logger is the command's log: records at the level -v / --log-level
// chose (default warn) as one line each on stderr.
func (c *cli) logger() *slog.Logger {
	return slog.New(&lineHandler{w: c.stderr, mu: &sync.Mutex{}, level: c.logLevel})
}

// lineHandler writes a record as "agrun: LEVEL NAME: message key=value",
// NAME being the tool's (the runtime's "name" attribute) when there is
// one: guest logs are read by tool name first (the module's hash follows
// as module=...). Every text goes through safe:
// messages come from guests and servers.
type lineHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	level slog.Level
	attrs []slog.Attr
	group string
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var name string
	var rest []slog.Attr
	add := func(a slog.Attr) bool {
		switch {
		case a.Key == "name" && h.group == "":
			name = a.Value.String()
		default:
			if h.group != "" {
				a.Key = h.group + "." + a.Key
			}
			rest = append(rest, a)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	var b bytes.Buffer
	// One prefix per level, the same as the CLI's own lines: "agrun:
	// warning: ", "agrun: error: ", "agrun: info: ", "agrun: debug: ".
	level := strings.ToLower(r.Level.String())
	if r.Level == slog.LevelWarn {
		level = "warning"
	}
	fmt.Fprintf(&b, "agrun: %s: ", level)
	if name != "" {
		b.WriteString(safe(name) + ": ")
	}
	b.WriteString(safe(r.Message))
	for _, a := range rest {
		fmt.Fprintf(&b, " %s=%s", safe(a.Key), safe(fmt.Sprint(a.Value.Any())))
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b.Bytes())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *lineHandler) WithGroup(g string) slog.Handler {
	c := *h
	if c.group != "" {
		g = c.group + "." + g
	}
	c.group = g
	return &c
}

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
