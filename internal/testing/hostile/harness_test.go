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
// process before the attack and hands the outcome to fixture.after, which
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
// run in a child (see child_test.go).

// Bounds of the leak checks.
const (
	settle          = 10 * time.Second // how long counts may take to come back (a loaded CI machine)
	maxHeapGrowth   = 32 << 20         // live Go heap after GC
	maxRSSGrowth    = 256 << 20        // resident set, incl. freed-but-kept pages
	callTimeout     = 400 * time.Millisecond
	smallMemory     = 16 << 20
	wordCountArgs   = `{"text":"the host survived"}`
	wordCountResult = `{"words":3,"lines":1,"chars":17,"bytes":17}`
)

// TestMain runs a child case when the test binary is re-executed as one.
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(runChild(name))
	}
	flag.Parse()
	if os.Getenv("AGRUN_HOSTILE_REACTOR") != "1" && selected("TestReactorAttacks") {
		reactor = startReactor() // beside the other tests (TestReactorAttacks)
	}
	code := m.Run()
	if reactor != nil {
		reactor.stop()
	}
	os.Exit(code)
}

// quietLogger drops what guests log through agrun.log.
var quietLogger = testrt.Quiet

// repoRoot is the module root, two levels up.
var repoRoot = filepath.Join("..", "..", "..")

// wordCountWasm is the honest example tool.
func wordCountWasm(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "word_count.wasm"))
	if err != nil {
		t.Fatalf("word_count.wasm: %v", err)
	}
	return b
}

// hostileWasm is the attacker guest shared with the wasmtools tests
// (internal/testing/testguest/testdata/hostile), built once.
func hostileWasm(t testing.TB) []byte {
	t.Helper()
	b := testguest.Hostile(t)
	if os.Getenv("AGRUN_HOSTILE_REACTOR") == "1" && !bytes.Contains(b, []byte("_initialize")) {
		t.Fatal("AGRUN_HOSTILE_REACTOR=1 but the attacker is not a reactor")
	}
	return b
}

// wat assembles testdata/wat/NAME.wat.
func wat(t testing.TB, name string) []byte {
	t.Helper()
	return testguest.WAT(t, filepath.Join("testdata", "wat", name+".wat"))
}

// pack embeds a manifest for name declaring perms into wasm.
func pack(t testing.TB, wasm []byte, name string, perms ...string) []byte {
	t.Helper()
	m := wasmtools.Manifest{Name: name, Description: "an uploaded tool", Permissions: mustPerms(t, perms...)}
	out, err := wasmtools.Pack(wasm, m)
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	return out
}

func mustPerms(t testing.TB, ss ...string) []permission.Permission {
	t.Helper()
	ps, err := permission.ParseList(ss)
	if err != nil {
		t.Fatalf("permissions %v: %v", ss, err)
	}
	return ps
}

// fixture is one sandbox set-up: a runtime, a registry holding word_count
// and the tools under attack, and a directory tree whose "mount" part is
// granted and whose "outside" part must never change.
type fixture struct {
	t       *testing.T
	rt      *runtime.Runtime
	reg     *registry.Registry
	root    string // the whole tree that is hashed
	mount   string // root/mount: granted to tools that ask
	outside string // root/outside: never granted
}

// secret is the content of every outside file: it must never reach a guest.
const secret = "TOP-SECRET-OUTSIDE"

// newFixture builds the tree and a registry whose policy allows read,
// network, filesystem, write and delete (so that the sandbox, not the
// policy, is what stops the attacks), with word_count registered.
func newFixture(t *testing.T, cfg runtime.Config) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, root: root, mount: filepath.Join(root, "mount"), outside: filepath.Join(root, "outside")}
	for _, d := range []string{f.mount, f.outside, filepath.Join(f.mount, "sub", "deeper"), filepath.Join(f.outside, "dir")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(f.outside, "secret.txt"), []byte(secret), 0o644))
	must(t, os.WriteFile(filepath.Join(f.outside, "dir", "secret.txt"), []byte(secret), 0o644))
	must(t, os.WriteFile(filepath.Join(f.mount, "hello.txt"), []byte("hello"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.mount, "sub", "file.txt"), []byte("sub"), 0o644))
	// Pre-existing ways out, planted by whoever filled the mount.
	must(t, os.Symlink(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.mount, "abs_link")))
	must(t, os.Symlink("../outside/secret.txt", filepath.Join(f.mount, "rel_link")))
	must(t, os.Symlink("../outside/dir", filepath.Join(f.mount, "dir_link")))
	must(t, os.Symlink("../../outside/secret.txt", filepath.Join(f.mount, "sub", "deep_link")))
	must(t, os.Symlink(filepath.Join(f.outside, "nope"), filepath.Join(f.mount, "dangling_out")))
	// A hard link made by the operator is just a file; the guest may read it
	// but writes through it must not reach the original outside — so the
	// suite does not plant one in a writable mount (see sandboxfs tests).
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	f.rt = testrt.New(t, cfg)
	pc := permission.DefaultConfig()
	pc.Allowed = append(pc.Allowed, mustPerms(t, "filesystem", "write", "delete")...)
	pc.Denied = mustPerms(t, "shell")
	f.reg = registry.New(registry.WithPermissionChecker(permission.NewChecker(pc)))
	f.register(t, f.load(t, wordCountWasm(t), wasmtools.Grant{}))
	return f
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// load is wasmtools.Load on the fixture's runtime; it fails the test.
func (f *fixture) load(t testing.TB, wasm []byte, g wasmtools.Grant) *wasmtools.Tool {
	t.Helper()
	tool, err := wasmtools.Load(context.Background(), f.rt, wasm, g)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { tool.Close(context.Background()) })
	return tool
}

func (f *fixture) register(t testing.TB, tool registry.Tool) {
	t.Helper()
	if err := f.reg.Register(tool); err != nil {
		t.Fatalf("Register %s: %v", tool.Name(), err)
	}
}

// hostile registers the attacker guest as name, declaring perms, with grant.
func (f *fixture) hostile(t testing.TB, name string, g wasmtools.Grant, perms ...string) {
	t.Helper()
	if g.Limits.Timeout == 0 {
		g.Limits.Timeout = callTimeout * 5
	}
	f.register(t, f.load(t, pack(t, hostileWasm(t), name, perms...), g))
}

// mountRW is a read-write-delete grant of the fixture's mount at /data.
func (f *fixture) mountRW() []wasmtools.Mount {
	return []wasmtools.Mount{{Host: f.mount, Guest: "/data", Writable: true, AllowDelete: true}}
}

// snapshot is the process state before an attack.
type snapshot struct {
	goroutines int
	fds        int
	heap       uint64
	rss        int64
	tree       string // everything but the mount
}

func (f *fixture) snapshot(t testing.TB) snapshot {
	t.Helper()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return snapshot{goroutines: goruntime.NumGoroutine(), fds: leak.OpenFDs(t), heap: ms.HeapAlloc, rss: procStatus(t, "VmRSS"), tree: leak.Tree(t, f.root, f.mount)}
}

// Outcome is what a case hands the after-conditions: the error the caller
// got (the Invocation's Err for registry calls) and, on success, the output.
type outcome struct {
	err error
	out json.RawMessage
}

func inv(i registry.Invocation) outcome { return outcome{err: i.Err, out: i.Output} }

// after checks every after-condition. want is the Kind the failure must
// have; "" means the call must succeed (the attack simply did not work,
// checked further by the case).
func (f *fixture) after(t testing.TB, before snapshot, got outcome, want registry.Kind) {
	t.Helper()
	checkKind(t, got.err, want)
	if got.err == nil && !utf8.Valid(got.out) {
		t.Errorf("output is not valid UTF-8: %q", got.out)
	}
	f.stillWorks(t)
	checkLeaks(t, before)
	if h := leak.Tree(t, f.root, f.mount); h != before.tree {
		t.Errorf("the tree changed outside what the case allowed:\n%s", treeListing(t, f.root))
	}
}

// checkKind asserts err is a *registry.Error of kind want (want "" means
// err must be nil) whose message is fit for a model and a terminal.
func checkKind(t testing.TB, err error, want registry.Kind) {
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
		t.Errorf("kind %s (%v); want %s", re.Kind, truncate(err.Error(), 500), want)
	}
	// What the loop hands the model: "error (<kind>): " + Message().
	checkModelText(t, re.Message())
}

// checkModelText asserts s is what a model or terminal may see: valid
// UTF-8, no character internal/textsafe calls unsafe (controls but newline
// and tab, C1, bidi and other invisible characters, private use, ...),
// bounded.
func checkModelText(t testing.TB, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("message is not valid UTF-8: %q", s)
	}
	if i := textsafe.IndexUnsafe(s); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		t.Errorf("message carries unsafe character %U: %q", r, truncate(s, 300))
	}
	if len(s) > 64<<10 {
		t.Errorf("message is %d bytes: unbounded", len(s))
	}
}

// stillWorks calls word_count.
func (f *fixture) stillWorks(t testing.TB) {
	t.Helper()
	i := f.reg.Invoke(context.Background(), "word_count", json.RawMessage(wordCountArgs))
	if i.Err != nil {
		t.Errorf("word_count after the attack: %v", i.Err)
		return
	}
	jsonEqual(t, i.Output, wordCountResult)
}

// checkLeaks waits for goroutines and descriptors to come back to their
// count before the case, and checks memory growth.
func checkLeaks(t testing.TB, before snapshot) {
	t.Helper()
	var g, fds int
	deadline := time.Now().Add(settle)
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
	if rss := procStatus(t, "VmRSS"); rss > before.rss+maxRSSGrowth {
		t.Errorf("RSS grew from %d to %d bytes", before.rss, rss)
	}
}

func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return truncate(string(buf[:goruntime.Stack(buf, true)]), 8000)
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
	v, err := readProcStatus(field)
	if err != nil {
		t.Fatalf("/proc/self/status: %v", err)
	}
	return v
}

func readProcStatus(field string) (int64, error) {
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

func treeListing(t testing.TB, root string) string {
	var lines []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		lines = append(lines, rel)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func jsonEqual(t testing.TB, got json.RawMessage, want string) {
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

// guestReply is what the hostile guest answers (testguest.Reply).
type guestReply = testguest.Reply

func decodeReply(t testing.TB, out json.RawMessage) guestReply { return testguest.DecodeReply(t, out) }

// argsJSON marshals v (a map or struct) as call arguments.
func argsJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bugObserved records that a racy case hit a reported bug: a log line
// normally, a failure with HOSTILE_BUGS=1.
//
//lint:ignore U1000 no case demonstrates a known bug today; docs/SECURITY.md ("Not defended yet") documents this hook for the next one
func bugObserved(t testing.TB, desc string) {
	t.Helper()
	if os.Getenv("HOSTILE_BUGS") == "1" {
		t.Error("BUG: " + desc)
		return
	}
	t.Log("BUG (reported, tolerated): " + desc)
}

// truncate is textsafe.Truncate, short for the many messages here.
func truncate(s string, n int) string { return textsafe.Truncate(s, n) }

// Child processes. ---------------------------------------------------------

const childEnv = "HOSTILE_CHILD"

// childCases are the cases run in a child process: each returns the line
// the parent checks (printed after childMarker) or an error.
var (
	childMu    sync.Mutex
	childCases = map[string]func() (string, error){}
)

const childMarker = "HOSTILE-RESULT: "

func registerChild(name string, fn func() (string, error)) bool {
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

// child re-executes the test binary as child case name with extra env
// (KEY=VALUE) and returns the result line and the process state. The child
// must exit within timeout.
func child(t *testing.T, name string, timeout time.Duration, env ...string) (string, *os.ProcessState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+name), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("child %s did not finish within %v; stderr:\n%s", name, timeout, truncate(stderr.String(), 4000))
	}
	var line string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if s, ok := strings.CutPrefix(l, childMarker); ok {
			line = s
		}
	}
	if line == "" {
		t.Fatalf("child %s died without a result (%v); stderr:\n%s", name, err, truncate(stderr.String(), 4000))
	}
	return line, cmd.ProcessState
}

// writeTemp writes b to a fresh file and returns its path.
func writeTemp(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(p, b, 0o644))
	return p
}
