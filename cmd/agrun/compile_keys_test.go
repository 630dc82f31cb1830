package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/cli/config"
)

// TestSandboxCompileKeys: [sandbox] max_compiles reaches the runtime,
// and max_metered_code refuses a tool whose metered code would be
// larger, module_refused naming the limit, as `agrun call` users see it.
func TestSandboxCompileKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "agrun.toml")
	body := fmt.Sprintf("[sandbox]\nno_cache = true\nmax_compiles = 1\nmax_metered_code = \"64KiB\"\n\n[tools.word_count]\nwasm = %q\n",
		filepath.Join(repoRoot(t), "testdata/word_count.wasm"))
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runIn(t, "", "-c", p, "call", "--json", "word_count", `{"text":"a b"}`).wantCode(t, exitUsage) // a configured tool that does not load
	if !strings.Contains(r.stdout, `"kind":"module_refused"`) || !strings.Contains(r.stdout, "over the limit of 65536 bytes of metered code") {
		t.Errorf("a tool over max_metered_code: %s %s", r.stdout, r.stderr)
	}
	cfg, err := config.Parse(p, []byte("[sandbox]\nno_cache = true\nmax_compiles = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEnv(context.Background(), cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if got := e.rt.MaxCompiles(); got != 3 {
		t.Errorf("the runtime compiles %d at once, want max_compiles = 3", got)
	}
}
