// Package clilog is the agrun command's log format: one line per record
// on stderr, with the prefix every line of the command has (CONTRIBUTING,
// "Messages to people").
//
//	log := slog.New(clilog.NewHandler(os.Stderr, slog.LevelWarn))
//	log.Warn("cache is full", "name", "word_count", "dir", dir)
//	// agrun: warning: word_count: cache is full dir=/tmp/...
package clilog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/agcore/agrun/internal/textsafe"
)

// ParseLevel reads a --log-level value: debug, info, warn (or warning,
// or empty) and error, in any case. Anything else is an error.
func ParseLevel(s string) (slog.Level, error) {
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
	return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
}

// NewHandler returns a handler that writes each record of level or above
// to w as one line, "agrun: LEVEL: NAME: message key=value ...": LEVEL
// is debug, info, warning or error, NAME the record's "name" attribute
// when it has one (the runtime's tool name: guest logs are read by tool
// name first, the module's hash follows as module=...). Every text is
// escaped (textsafe.Escape): messages come from guests and servers. The
// handler, and those WithAttrs and WithGroup derive from it, may be used
// concurrently; their lines are written whole, one at a time.
func NewHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return &lineHandler{w: w, mu: &sync.Mutex{}, level: level}
}

type lineHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	level slog.Leveler
	attrs []slog.Attr
	group string
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	safe := textsafe.Escape
	var name string
	var rest []slog.Attr
	add := func(a slog.Attr) bool { // a's key is qualified by its groups
		if a.Key == "name" {
			name = a.Value.String()
		} else {
			rest = append(rest, a)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { return add(h.qualify(a)) })
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

// qualify prefixes a's key with the handler's groups.
func (h *lineHandler) qualify(a slog.Attr) slog.Attr {
	if h.group != "" {
		a.Key = h.group + "." + a.Key
	}
	return a
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = slices.Clone(h.attrs)
	for _, a := range as {
		c.attrs = append(c.attrs, h.qualify(a)) // in the groups opened so far, not later ones
	}
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
