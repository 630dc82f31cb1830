package clilog

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

func ExampleNewHandler() {
	log := slog.New(NewHandler(os.Stdout, slog.LevelInfo))
	log.Debug("not shown")
	log.Info("compiled", "name", "word_count", "ms", 120)
	log.With("name", "notes").WithGroup("mcp").Warn("slow\x1b[2J", "server", "fs")
	log.Error("failed")
	// Output:
	// agrun: info: word_count: compiled ms=120
	// agrun: warning: notes: slow\x1b[2J mcp.server=fs
	// agrun: error: failed
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{"": slog.LevelWarn, "DEBUG": slog.LevelDebug, "info": slog.LevelInfo, "warning": slog.LevelWarn, "warn": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), `--log-level "loud"`) {
		t.Errorf("ParseLevel(loud): %v", err)
	}
}

// TestLinesStayWhole: records logged at once from many goroutines come
// out as whole lines, none interleaved.
func TestLinesStayWhole(t *testing.T) {
	var b strings.Builder
	log := slog.New(NewHandler(&b, slog.LevelInfo))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { log.Info(strings.Repeat("x", 100+i)) })
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d lines, want 20", len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "agrun: info: xxx") || strings.Trim(strings.TrimPrefix(l, "agrun: info: "), "x") != "" {
			t.Errorf("line %q", l)
		}
	}
}
