package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/mddoc"
	"github.com/agcore/agrun/internal/testing/testguest"
)

// docShell runs the documents' command lines with sh, as a reader types
// them: in dir, with the agrun under test first on PATH.
type docShell struct {
	t   *testing.T
	dir string
	env []string
}

func newDocShell(t *testing.T, dir string, env ...string) *docShell {
	t.Helper()
	path := filepath.Dir(binary(t)) + string(os.PathListSeparator) + os.Getenv("PATH")
	return &docShell{t: t, dir: dir, env: append(append(os.Environ(), "PATH="+path), env...)}
}

// run runs line with sh -c, stdin given, and returns what it did.
func (s *docShell) run(stdin, line string) result {
	s.t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir, cmd.Env = s.dir, s.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		s.t.Fatalf("%s: %v", line, err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// must runs line and fails the test unless it exits 0.
func (s *docShell) must(line string) result {
	s.t.Helper()
	r := s.run("", line)
	if r.code != 0 {
		s.t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", line, r.code, r.stdout, r.stderr)
	}
	return r
}

// checkAnswer runs c and compares its stdout with the answer the
// document shows under it: exit 0, or 1 when that answer is a tool's
// failure ("ok":false).
func (s *docShell) checkAnswer(c mddoc.ShellCmd) result {
	s.t.Helper()
	r := s.run("", c.Line)
	want := strings.Join(c.Want, "\n")
	code := 0
	if strings.Contains(want, `"ok":false`) {
		code = 1
	}
	if r.code != code || (want != "" && strings.TrimSpace(r.stdout) != want) {
		s.t.Errorf("%s: exit %d, stdout %q; the document shows exit %d and %q\nstderr: %s", c.Line, r.code, r.stdout, code, want, r.stderr)
	}
	return r
}

// goEnv is the go command's own cache settings, for a build under another
// HOME: the build and module caches stay the shared ones.
func goEnv(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatal(err)
	}
	v := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(v) != 3 {
		t.Fatalf("go env: %q", out)
	}
	return []string{"GOCACHE=" + v[0], "GOMODCACHE=" + v[1], "GOPATH=" + v[2]}
}

// TestGuestSDKWalkthrough follows guest-sdk/README.md from "1. Write" to
// "6. Configure and run" as a tool author does, in a scratch folder that is
// a module of its own: the main.go of section 1 and the manifest of
// section 2 written where the walk-through puts them, every command of
// sections 3 to 6 run with sh (`git clone` aside: ~/src/agrun is this
// checkout), the go.mod it shows, the answers it shows, and the sizes of
// its note on size.
func TestGuestSDKWalkthrough(t *testing.T) {
	t.Parallel()
	doc := mddoc.Read(t, "guest-sdk/README.md")
	root := repoRoot(t)
	work, home := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(home, "src", "agrun")); err != nil {
		t.Fatal(err)
	}
	sh := newDocShell(t, work, append(goEnv(t), "HOME="+home, "GOFLAGS=", "XDG_DATA_HOME="+filepath.Join(work, "data"))...)

	// 1. Write: the block that names its file in its first line.
	var mainFile string
	for _, b := range doc.Section(t, "## 1. Write").Blocks("go") {
		if first, rest, _ := strings.Cut(b, "\n"); strings.HasPrefix(first, "// ") && strings.HasSuffix(first, ".go") {
			mainFile = strings.TrimPrefix(first, "// ")
			writeFile(t, filepath.Join(work, mainFile), rest)
		}
	}
	if mainFile == "" {
		t.Fatal("section 1 has no Go block starting with its file name (// hello/main.go)")
	}
	// 2. The manifest, where pack (section 4) reads it.
	pack := doc.Section(t, "## 4. Pack").ShellCmds()
	manifests := doc.Section(t, "## 2. Describe it: the manifest").Blocks("toml")
	if len(pack) != 1 || len(manifests) == 0 {
		t.Fatalf("want one pack command and a manifest block; have %d, %d", len(pack), len(manifests))
	}
	m := regexp.MustCompile(`-m (\S+)`).FindStringSubmatch(pack[0].Line)
	if m == nil {
		t.Fatalf("pack names no manifest: %q", pack[0].Line)
	}
	writeFile(t, filepath.Join(work, m[1]), manifests[0])

	// 3. Build: the module set-up and the build, in the document's order.
	build := doc.Section(t, "## 3. Build")
	cmds := build.ShellCmds()
	if len(cmds) < 5 || !strings.HasPrefix(cmds[0].Line, "git clone ") {
		t.Fatalf("section 3: want git clone, the go mod commands and go build; have %+v", cmds)
	}
	for _, c := range cmds[1:] {
		sh.must(c.Line)
	}
	gomod, err := os.ReadFile(filepath.Join(work, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	plain := build.Blocks("")
	if len(plain) == 0 {
		t.Fatal("section 3 shows no go.mod lines")
	}
	for _, l := range strings.Split(strings.TrimSpace(plain[0]), "\n") {
		l = strings.Replace(l, "/home/you", home, 1)
		if !strings.Contains(string(gomod), l) {
			t.Errorf("go.mod lacks %q, which section 3 says tidy leaves:\n%s", l, gomod)
		}
	}
	// 4. Pack, 5. Inspect.
	sh.must(pack[0].Line)
	inspect := doc.Section(t, "## 5. Inspect").ShellCmds()
	if len(inspect) != 1 {
		t.Fatalf("section 5: %+v", inspect)
	}
	if r := sh.must(inspect[0].Line); !strings.Contains(r.stdout, "hello") || !regexp.MustCompile(`[0-9a-f]{64}`).MatchString(r.stdout) {
		t.Errorf("%s: no name or sha256:\n%s", inspect[0].Line, r.stdout)
	}
	// 6. The [tools.hello] block as agrun.toml (with the shared compile
	// cache), then the calls and their answers.
	run := doc.Section(t, "## 6. Configure and run")
	tomls := run.Blocks("toml")
	if len(tomls) == 0 || !strings.HasPrefix(tomls[0], "[tools.hello]") {
		t.Fatalf("section 6: no [tools.hello] block first: %q", tomls)
	}
	writeFile(t, filepath.Join(work, "agrun.toml"), fmt.Sprintf("[sandbox]\ncache_dir = %q\n\n%s", testguest.CompilationCacheDir(t), tomls[0]))
	calls := run.ShellCmds()
	if len(calls) < 3 {
		t.Fatalf("section 6: %+v", calls)
	}
	for _, c := range calls {
		r := sh.checkAnswer(c)
		if strings.HasPrefix(c.Line, "agrun tools") && !strings.Contains(r.stdout, "hello") {
			t.Errorf("%s does not list hello:\n%s", c.Line, r.stdout)
		}
	}
	checkSizes(t, doc.Section(t, "## When something goes wrong").Text, work)
}

// TestGuestSDKCTool builds and calls guest-sdk/README.md's C tool as
// "Other languages" says, from a scratch folder holding the repository's
// testdata (the commands run from the repository's root), and checks that
// the flags give testdata/sum_c.wasm byte for byte, as the document says
// they do with clang 14.
func TestGuestSDKCTool(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("SKIPPED: clang is not installed: guest-sdk/README.md's C tool was NOT built or called; run scripts/setup.sh (clang lld wasi-libc libclang-rt-14-dev-wasm32)")
	}
	if _, err := os.Stat("/usr/include/wasm32-wasi/stdio.h"); err != nil {
		t.Skip("SKIPPED: wasi-libc is not installed (/usr/include/wasm32-wasi): guest-sdk/README.md's C tool was NOT built or called; run scripts/setup.sh")
	}
	sec := mddoc.Read(t, "guest-sdk/README.md").Section(t, "## Other languages")
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(repoRoot(t), "testdata"), filepath.Join(work, "testdata")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(work, "agrun.toml"), fmt.Sprintf("[sandbox]\ncache_dir = %q\n", testguest.CompilationCacheDir(t)))
	sh := newDocShell(t, work)
	cmds := sec.ShellCmds()
	if len(cmds) != 4 || !strings.HasPrefix(cmds[0].Line, "sudo apt-get install ") {
		t.Fatalf("want apt-get, clang, pack and call; have %+v", cmds)
	}
	sh.must(cmds[1].Line)
	sh.must(cmds[2].Line)
	if len(cmds[3].Want) == 0 {
		t.Fatalf("the call shows no answer: %+v", cmds[3])
	}
	sh.checkAnswer(cmds[3])
	// The file called is the one just built, not the configured one.
	if !strings.Contains(cmds[3].Line, "./sum_c.wasm") {
		t.Errorf("the call does not name the file just built: %q", cmds[3].Line)
	}
	checkSizes(t, cmds[2].Line+" "+cmds[2].Comment, work)
	v, _ := exec.Command("clang", "-dumpversion").Output()
	if strings.HasPrefix(string(v), "14.") {
		built, _ := os.ReadFile(filepath.Join(work, "sum_c.wasm"))
		committed, _ := os.ReadFile(filepath.Join(repoRoot(t), "testdata/sum_c.wasm"))
		if !bytes.Equal(built, committed) {
			t.Errorf("the README's flags do not give testdata/sum_c.wasm (%d bytes, %d committed): they differ from scripts/build-examples.sh's", len(built), len(committed))
		}
	}
}

// checkSizes checks each size a text gives for a file ("`hello.wasm`: 3.5
// MB", "sum_c.wasm ... about 36 KB"): within 10% of the file's size, in
// dir, else in the repository's root.
func checkSizes(t *testing.T, text, dir string) {
	t.Helper()
	sizes := regexp.MustCompile("`?([\\w./-]+\\.wasm)`?[^`0-9.]*?([0-9.]+) (MB|KB)").FindAllStringSubmatch(strings.Join(strings.Fields(text), " "), -1)
	if len(sizes) == 0 {
		t.Errorf("no sizes found in %q", text)
	}
	for _, s := range sizes {
		n, _ := strconv.ParseFloat(s[2], 64)
		if s[3] == "MB" {
			n *= 1e6
		} else {
			n *= 1e3
		}
		fi, err := os.Stat(filepath.Join(dir, s[1]))
		if err != nil {
			fi, err = os.Stat(filepath.Join(repoRoot(t), s[1]))
		}
		if err != nil {
			t.Errorf("%s (%s %s in the text): %v", s[1], s[2], s[3], err)
			continue
		}
		if got := float64(fi.Size()); got < 0.9*n || got > 1.1*n {
			t.Errorf("%s is %d bytes; the text says %s %s", s[1], fi.Size(), s[2], s[3])
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
