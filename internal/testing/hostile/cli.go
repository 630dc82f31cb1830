//go:build unix

package hostile

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/wasmtools"
)

// AgrunBinary is cmd/agrun, built once per version of the sources into
// the shared test cache (cmd/agrun's tests run the same build).
func AgrunBinary(t *testing.T) string {
	t.Helper()
	return testguest.Agrun(t)
}

// CLIEnv is a directory with an agrun.toml naming the attacker tools.
type CLIEnv struct {
	T      *testing.T
	Dir    string
	Config string
}

// NewCLIEnv writes an agrun.toml in a temporary folder: the model at
// llmURL, the suite's compilation cache, word_count and the attacker
// guest as tools (out_json, out_text, bigmin, ...), extra appended.
func NewCLIEnv(t *testing.T, llmURL, extra string) *CLIEnv {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		Must(t, os.WriteFile(p, b, 0o644))
		return p
	}
	textWasm, err := wasmtools.Pack(HostileWasm(t), wasmtools.Manifest{Name: "out_text", Description: "text", Output: wasmtools.OutputText})
	Must(t, err)
	wc, err := filepath.Abs(filepath.Join(RepoRoot, "testdata", "word_count.wasm"))
	Must(t, err)
	if llmURL == "" {
		llmURL = "http://127.0.0.1:1/v1"
	}
	cfg := fmt.Sprintf(`[llm]
base_url = %q
model = "m"
api_key_env = "HOSTILE_TEST_KEY"
max_turns = 4

[sandbox]
cache_dir = %q
timeout = "2s"

[sessions]
dir = %q

[tools.word_count]
wasm = %q

[tools.out_json]
wasm = %q

[tools.out_text]
wasm = %q

[tools.broken_bigmin]
wasm = %q
`, llmURL, CacheDirFor(t), filepath.Join(dir, "sessions"), wc,
		write("out_json.wasm", Pack(t, HostileWasm(t), "out_json")), write("out_text.wasm", textWasm),
		write("bigmin.wasm", Pack(t, WAT(t, "bigmin"), "bigmin")))
	return &CLIEnv{T: t, Dir: dir, Config: write("agrun.toml", []byte(cfg+extra))}
}

// CLIResult is what one agrun process printed and its exit code.
type CLIResult struct {
	Stdout, Stderr []byte
	Code           int
}

// Run runs the built agrun with e's config and args, stdin as its
// input; the test fails if the process did not exit normally.
func (e *CLIEnv) Run(stdin string, args ...string) CLIResult {
	e.T.Helper()
	cmd := exec.Command(AgrunBinary(e.T), append([]string{"-c", e.Config}, args...)...)
	cmd.Env = append(os.Environ(), "HOSTILE_TEST_KEY=k")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
		e.T.Fatalf("agrun %v did not exit normally: %v\nstderr: %s", args, cmd.ProcessState, Truncate(errb.String(), 2000))
	}
	return CLIResult{Stdout: out.Bytes(), Stderr: errb.Bytes(), Code: cmd.ProcessState.ExitCode()}
}

// CheckTerminalSafe asserts b can go to a terminal: valid UTF-8, no ESC,
// no other C0 control but newline and tab, no DEL, no C1 control (U+0080 to
// U+009F: UTF-8 terminals such as xterm take U+009B as CSI), no bidi
// override.
func CheckTerminalSafe(t testing.TB, what string, b []byte) {
	t.Helper()
	if !utf8.Valid(b) {
		t.Errorf("%s is not valid UTF-8: %q", what, Truncate(string(b), 300))
	}
	var c1, bidi bool
	for _, r := range string(b) {
		switch {
		case r < 0x20 && r != '\n' && r != '\t' || r == 0x7f:
			t.Errorf("%s carries %U: %q", what, r, Truncate(string(b), 600))
			return
		case r >= 0x80 && r < 0xa0:
			c1 = true
		case r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
			bidi = true
		}
	}
	if c1 {
		t.Errorf("%s: C1 control characters printed raw: %q", what, Truncate(string(b), 600))
	}
	if bidi {
		t.Errorf("%s: bidi overrides printed raw: %q", what, Truncate(string(b), 600))
	}
}
