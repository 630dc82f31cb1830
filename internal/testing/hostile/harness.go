//go:build unix

package hostile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/testing/leak"
	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// The shared after-conditions of every case. A case takes a snapshot of the
// process before the attack and hands the outcome to Fixture.After, which
// checks, in order:
//
//  1. the failure is a *registry.Error of the expected Kind (or the call
//     succeeded, when the attack must simply not work);
//  2. the message the model would read is valid UTF-8 without control
//     characters but newline and tab;
//  3. an honest tool (word_count) still works;
//  4. no goroutine and no file descriptor was leaked (counts settle back);
//  5. the Go heap and the RSS did not grow by more than a bound;
//  6. no file outside the sandbox changed (a hash of the whole tree but
//     the granted mount; cases with a read-only mount hash that too).
//
// The process being alive is implied in-process; cases that could kill it
// run in a child (RegisterChild, Child).

// Bounds of the leak checks.
const (
	Settle          = 10 * time.Second // how long counts may take to come back (a loaded CI machine)
	maxHeapGrowth   = 32 << 20         // live Go heap after GC
	MaxRSSGrowth    = 256 << 20        // resident set, incl. freed-but-kept pages
	CallTimeout     = 400 * time.Millisecond
	SmallMemory     = 16 << 20
	WordCountArgs   = `{"text":"the host survived"}`
	WordCountResult = `{"words":3,"lines":1,"chars":17,"bytes":17}`
)

// Main is the TestMain of the suite's packages: in a test binary
// re-executed as a child case (Child) it runs that case and exits;
// otherwise it runs the tests. before, if not nil, runs once the flags
// are parsed, before the tests, and returns what runs after them (nil:
// nothing).
func Main(m *testing.M, before func() (after func())) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(runChild(name))
	}
	flag.Parse()
	var after func()
	if before != nil {
		after = before()
	}
	code := m.Run()
	if after != nil {
		after()
	}
	os.Exit(code)
}

// Dir is this package's folder (testdata/ is in it), wherever the test
// binary of a package of the suite runs.
var Dir = func() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Dir(file)
}()

// CacheDirFor is the compilation cache the suite's runtimes share
// (testguest's).
func CacheDirFor(t testing.TB) string {
	t.Helper()
	return testguest.CompilationCacheDir(t)
}

// QuietLogger drops what guests log through agrun.log.
var QuietLogger = testrt.Quiet

// RepoRoot is the module root, three levels up.
var RepoRoot = filepath.Join(Dir, "..", "..", "..")

// WordCountWasm is the honest example tool.
func WordCountWasm(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot, "testdata", "word_count.wasm"))
	if err != nil {
		t.Fatalf("word_count.wasm: %v", err)
	}
	return b
}

// HostileWasm is the attacker guest shared with the wasmtools tests
// (internal/testing/testguest/testdata/hostile), built once.
func HostileWasm(t testing.TB) []byte {
	t.Helper()
	b := testguest.Hostile(t)
	if os.Getenv("AGRUN_HOSTILE_REACTOR") == "1" && !bytes.Contains(b, []byte("_initialize")) {
		t.Fatal("AGRUN_HOSTILE_REACTOR=1 but the attacker is not a reactor")
	}
	return b
}

// WAT assembles testdata/wat/NAME.wat.
func WAT(t testing.TB, name string) []byte {
	t.Helper()
	return testguest.WAT(t, filepath.Join(Dir, "testdata", "wat", name+".wat"))
}

// Pack embeds a manifest for name declaring perms into wasm.
func Pack(t testing.TB, wasm []byte, name string, perms ...string) []byte {
	t.Helper()
	m := wasmtools.Manifest{Name: name, Description: "an uploaded tool", Permissions: MustPerms(t, perms...)}
	out, err := wasmtools.Pack(wasm, m)
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	return out
}

// MustPerms parses permission names; it fails the test.
func MustPerms(t testing.TB, ss ...string) []permission.Permission {
	t.Helper()
	ps, err := permission.ParseList(ss)
	if err != nil {
		t.Fatalf("permissions %v: %v", ss, err)
	}
	return ps
}

// Fixture is one sandbox set-up: a runtime, a registry holding word_count
// and the tools under attack, and a directory tree whose "mount" part is
// granted and whose "outside" part must never change.
type Fixture struct {
	t       *testing.T
	Rt      *runtime.Runtime
	Reg     *registry.Registry
	root    string // the whole tree that is hashed
	Mount   string // root/mount: granted to tools that ask
	Outside string // root/outside: never granted
}

// Secret is the content of every outside file: it must never reach a guest.
const Secret = "TOP-SECRET-OUTSIDE"

// NewFixture builds the tree and a registry whose policy allows read,
// network, filesystem, write and delete (so that the sandbox, not the
// policy, is what stops the attacks), with word_count registered.
func NewFixture(t *testing.T, cfg runtime.Config) *Fixture {
	t.Helper()
	root := t.TempDir()
	f := &Fixture{t: t, root: root, Mount: filepath.Join(root, "mount"), Outside: filepath.Join(root, "outside")}
	for _, d := range []string{f.Mount, f.Outside, filepath.Join(f.Mount, "sub", "deeper"), filepath.Join(f.Outside, "dir")} {
		Must(t, os.MkdirAll(d, 0o755))
	}
	Must(t, os.WriteFile(filepath.Join(f.Outside, "secret.txt"), []byte(Secret), 0o644))
	Must(t, os.WriteFile(filepath.Join(f.Outside, "dir", "secret.txt"), []byte(Secret), 0o644))
	Must(t, os.WriteFile(filepath.Join(f.Mount, "hello.txt"), []byte("hello"), 0o644))
	Must(t, os.WriteFile(filepath.Join(f.Mount, "sub", "file.txt"), []byte("sub"), 0o644))
	// Pre-existing ways out, planted by whoever filled the mount.
	Must(t, os.Symlink(filepath.Join(f.Outside, "secret.txt"), filepath.Join(f.Mount, "abs_link")))
	Must(t, os.Symlink("../outside/secret.txt", filepath.Join(f.Mount, "rel_link")))
	Must(t, os.Symlink("../outside/dir", filepath.Join(f.Mount, "dir_link")))
	Must(t, os.Symlink("../../outside/secret.txt", filepath.Join(f.Mount, "sub", "deep_link")))
	Must(t, os.Symlink(filepath.Join(f.Outside, "nope"), filepath.Join(f.Mount, "dangling_out")))
	// A hard link made by the operator is just a file; the guest may read it
	// but writes through it must not reach the original outside — so the
	// suite does not plant one in a writable mount (see sandboxfs tests).
	if cfg.Logger == nil {
		cfg.Logger = QuietLogger
	}
	f.Rt = testrt.New(t, cfg)
	pc := permission.DefaultConfig()
	pc.Allowed = append(pc.Allowed, MustPerms(t, "filesystem", "write", "delete")...)
	pc.Denied = MustPerms(t, "shell")
	f.Reg = registry.New(registry.WithPermissionChecker(permission.NewChecker(pc)))
	f.Register(t, f.Load(t, WordCountWasm(t), wasmtools.Grant{}))
	return f
}

// Must fails the test if err is not nil.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Load is wasmtools.Load on the fixture's runtime; it fails the test.
func (f *Fixture) Load(t testing.TB, wasm []byte, g wasmtools.Grant) *wasmtools.Tool {
	t.Helper()
	tool, err := wasmtools.Load(context.Background(), f.Rt, wasm, g)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { tool.Close(context.Background()) })
	return tool
}

// Register adds tool to the fixture's registry; it fails the test.
func (f *Fixture) Register(t testing.TB, tool registry.Tool) {
	t.Helper()
	if err := f.Reg.Register(tool); err != nil {
		t.Fatalf("Register %s: %v", tool.Name(), err)
	}
}

// Hostile registers the attacker guest as name, declaring perms, with grant.
func (f *Fixture) Hostile(t testing.TB, name string, g wasmtools.Grant, perms ...string) {
	t.Helper()
	if g.Limits.Timeout == 0 {
		g.Limits.Timeout = CallTimeout * 5
	}
	f.Register(t, f.Load(t, Pack(t, HostileWasm(t), name, perms...), g))
}

// MountRW is a read-write-delete grant of the fixture's mount at /data.
func (f *Fixture) MountRW() []wasmtools.Mount {
	return []wasmtools.Mount{{Host: f.Mount, Guest: "/data", Writable: true, AllowDelete: true}}
}

// Snapshot is the process state before an attack.
type Snapshot struct {
	goroutines int
	fds        int
	heap       uint64
	rss        int64
	tree       string // everything but the mount
}

// Snapshot takes the process state before an attack (After compares).
func (f *Fixture) Snapshot(t testing.TB) Snapshot {
	t.Helper()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return Snapshot{goroutines: goruntime.NumGoroutine(), fds: leak.OpenFDs(t), heap: ms.HeapAlloc, rss: procStatus(t, "VmRSS"), tree: leak.Tree(t, f.root, f.Mount)}
}

// Outcome is what a case hands the after-conditions: the error the caller
// got (the Invocation's Err for registry calls) and, on success, the output.
type Outcome struct {
	Err error
	Out json.RawMessage
}

// Inv is the Outcome of a registry call.
func Inv(i registry.Invocation) Outcome { return Outcome{Err: i.Err, Out: i.Output} }

// After checks every after-condition. want is the Kind the failure must
// have; "" means the call must succeed (the attack simply did not work,
// checked further by the case).
func (f *Fixture) After(t testing.TB, before Snapshot, got Outcome, want registry.Kind) {
	t.Helper()
	CheckKind(t, got.Err, want)
	if got.Err == nil && !utf8.Valid(got.Out) {
		t.Errorf("output is not valid UTF-8: %q", got.Out)
	}
	f.StillWorks(t)
	CheckLeaks(t, before)
	if h := leak.Tree(t, f.root, f.Mount); h != before.tree {
		t.Errorf("the tree changed outside what the case allowed:\n%s", TreeListing(t, f.root))
	}
}

// CheckKind asserts err is a *registry.Error of kind want (want "" means
// err must be nil) whose message is fit for a model and a terminal.
func CheckKind(t testing.TB, err error, want registry.Kind) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("call failed: %v; want success", err)
		}
		return
	}
	var re *registry.Error
	if !errors.As(err, &re) {
		t.Errorf("error %v (%T); want a *registry.Error of kind %s", err, err, want)
		return
	}
	if re.Kind != want {
		t.Errorf("kind %s (%v); want %s", re.Kind, Truncate(err.Error(), 500), want)
	}
	// What the loop hands the model: "error (<kind>): " + Message().
	CheckModelText(t, re.Message())
}

// CheckModelText asserts s is what a model or terminal may see: valid
// UTF-8, no character internal/textsafe calls unsafe (controls but newline
// and tab, C1, bidi and other invisible characters, private use, ...),
// bounded.
func CheckModelText(t testing.TB, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("message is not valid UTF-8: %q", s)
	}
	if i := textsafe.IndexUnsafe(s); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		t.Errorf("message carries unsafe character %U: %q", r, Truncate(s, 300))
	}
	if len(s) > 64<<10 {
		t.Errorf("message is %d bytes: unbounded", len(s))
	}
}

// StillWorks calls word_count.
func (f *Fixture) StillWorks(t testing.TB) {
	t.Helper()
	i := f.Reg.Invoke(context.Background(), "word_count", json.RawMessage(WordCountArgs))
	if i.Err != nil {
		t.Errorf("word_count after the attack: %v", i.Err)
		return
	}
	JSONEqual(t, i.Output, WordCountResult)
}

// CheckLeaks waits for goroutines and descriptors to come back to their
// count before the case, and checks memory growth.
func CheckLeaks(t testing.TB, before Snapshot) {
	t.Helper()
	var g, fds int
	deadline := time.Now().Add(Settle)
	for {
		g, fds = goruntime.NumGoroutine(), leak.OpenFDs(t)
		if g <= before.goroutines && fds <= before.fds || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g > before.goroutines {
		t.Errorf("goroutine leak: %d before, %d after\n%s", before.goroutines, g, goroutineDump())
	}
	if fds > before.fds {
		t.Errorf("file descriptor leak: %d before, %d after: %s", before.fds, fds, fdListing())
	}
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	if ms.HeapAlloc > before.heap+maxHeapGrowth {
		t.Errorf("live heap grew from %d to %d bytes", before.heap, ms.HeapAlloc)
	}
	if rss := procStatus(t, "VmRSS"); rss > before.rss+MaxRSSGrowth {
		t.Errorf("RSS grew from %d to %d bytes", before.rss, rss)
	}
}

func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return Truncate(string(buf[:goruntime.Stack(buf, true)]), 8000)
}

func fdListing() string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var s []string
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		s = append(s, e.Name()+"->"+l)
	}
	return strings.Join(s, " ")
}

// procStatus reads a kB field of /proc/self/status, in bytes.
func procStatus(t testing.TB, field string) int64 {
	t.Helper()
	v, err := ReadProcStatus(field)
	if err != nil {
		t.Fatalf("/proc/self/status: %v", err)
	}
	return v
}

// ReadProcStatus reads a kB field of /proc/self/status, in bytes.
func ReadProcStatus(field string) (int64, error) {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s", field)
}

// TreeListing lists the paths under root, sorted, for a failure's
// message.
func TreeListing(t testing.TB, root string) string {
	var lines []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		lines = append(lines, rel)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// JSONEqual fails the test unless got and want are the same JSON value.
func JSONEqual(t testing.TB, got json.RawMessage, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Errorf("output %q is not JSON: %v", got, err)
		return
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatalf("bad want %q: %v", want, err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Errorf("output %s; want %s", ja, jb)
	}
}

// DecodeReply decodes what the hostile guest answers (testguest.Reply).
func DecodeReply(t testing.TB, out json.RawMessage) testguest.Reply {
	return testguest.DecodeReply(t, out)
}

// ArgsJSON marshals v (a map or struct) as call arguments.
func ArgsJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BugObserved records that a racy case hit a reported bug: a log line
// normally, a failure with HOSTILE_BUGS=1. No case calls it today;
// docs/SECURITY.md ("Not defended yet") documents it for the next one.
func BugObserved(t testing.TB, desc string) {
	t.Helper()
	if os.Getenv("HOSTILE_BUGS") == "1" {
		t.Error("BUG: " + desc)
		return
	}
	t.Log("BUG (reported, tolerated): " + desc)
}

// Truncate is textsafe.Truncate, short for the many messages here.
func Truncate(s string, n int) string { return textsafe.Truncate(s, n) }

const childEnv = "HOSTILE_CHILD"

// childCases are the cases run in a child process: each returns the line
// the parent checks (printed after childMarker) or an error.
var (
	childMu    sync.Mutex
	childCases = map[string]func() (string, error){}
)

const childMarker = "HOSTILE-RESULT: "

// RegisterChild registers fn as the child case name (Child runs it in a
// re-executed test binary); it returns true, for a package-level var _.
func RegisterChild(name string, fn func() (string, error)) bool {
	childMu.Lock()
	defer childMu.Unlock()
	childCases[name] = fn
	return true
}

func runChild(name string) int {
	fn, ok := childCases[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "no child case %q\n", name)
		return 3
	}
	res, err := fn()
	if err != nil {
		fmt.Printf("%s%s\n", childMarker, "error: "+err.Error())
		return 1
	}
	fmt.Printf("%s%s\n", childMarker, res)
	return 0
}

// Child re-executes the test binary as child case name with extra env
// (KEY=VALUE) and returns the result line and the process state. The child
// Must exit within timeout.
func Child(t *testing.T, name string, timeout time.Duration, env ...string) (string, *os.ProcessState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+name), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("child %s did not finish within %v; stderr:\n%s", name, timeout, Truncate(stderr.String(), 4000))
	}
	var line string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if s, ok := strings.CutPrefix(l, childMarker); ok {
			line = s
		}
	}
	if line == "" {
		t.Fatalf("child %s died without a result (%v); stderr:\n%s", name, err, Truncate(stderr.String(), 4000))
	}
	return line, cmd.ProcessState
}

// WriteTemp writes b to a fresh file and returns its path.
func WriteTemp(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	Must(t, os.WriteFile(p, b, 0o644))
	return p
}
