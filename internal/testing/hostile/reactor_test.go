package hostile

import (
	"cmp"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// reactorAttacks are the tests whose attacks run again against the
// attacker built as a reactor (instances started from a snapshot,
// prepared before and closed after their call).
const reactorAttacks = "^(TestCPU|TestMemory|TestFilesEscapes|TestFilesReadOnly|TestFilesResources|TestFilesPlantedHardLink|TestNetworkRefusals|TestNetworkResponses|TestOutput|TestLogFlood|TestManifests|TestHostFunctionAbuse)$"

// TestReactorAttacks runs the attacks of the tests above once more, with
// the attacker built with -buildmode=c-shared: this test binary again, in
// a child process with AGRUN_HOSTILE_REACTOR=1 (see testguest.Hostile).
// TestMain starts that child before the other tests, so that it runs
// beside them instead of after them (half a minute, mostly while this
// process waits in its own cases' timeouts); this test waits for it.
func TestReactorAttacks(t *testing.T) {
	if os.Getenv("AGRUN_HOSTILE_REACTOR") == "1" {
		t.Skip("already the reactor run")
	}
	c := takeReactorChild()
	if c == nil { // not started by TestMain (-test.count > 1, say)
		c = startReactorChild()
	}
	out, err := c.wait()
	if err != nil {
		t.Fatalf("the attacks against the reactor build failed: %v\n%s", err, out)
	}
	for _, name := range []string{"TestCPU", "TestMemory", "TestFilesEscapes", "TestNetworkRefusals", "TestOutput"} {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Errorf("%s did not run and pass against the reactor build:\n%s", name, out)
		}
	}
}

// reactorChild is a running child of TestReactorAttacks. While it runs
// this process holds nothing for it (its output goes to a file, closed
// here after the start, and nothing waits for it until wait), so the
// leak checks of the cases that run meanwhile count the same goroutines
// and descriptors as without it.
type reactorChild struct {
	cmd *exec.Cmd
	out string // the file its output goes to
	err error  // why it could not be started
}

var (
	pendingMu      sync.Mutex
	pendingReactor *reactorChild // started by TestMain, not yet taken
)

// startReactorChild starts the reactor attacks in a child.
func startReactorChild() *reactorChild {
	c := &reactorChild{}
	f, err := os.CreateTemp("", "hostile-reactor-*.out")
	if err != nil {
		c.err = err
		return c
	}
	c.out = f.Name()
	c.cmd = exec.Command(os.Args[0], "-test.run", reactorAttacks, "-test.count=1", "-test.v")
	c.cmd.Env = append(os.Environ(), "AGRUN_HOSTILE_REACTOR=1")
	c.cmd.Stdout, c.cmd.Stderr = f, f
	c.err = c.cmd.Start()
	f.Close()
	return c
}

// wait waits for the child and returns its output.
func (c *reactorChild) wait() (string, error) {
	if c.out != "" {
		defer os.Remove(c.out)
	}
	if c.err != nil {
		return "", c.err
	}
	err := c.cmd.Wait()
	b, rerr := os.ReadFile(c.out)
	return string(b), cmp.Or(err, rerr)
}

// kill ends a child nobody waited for.
func (c *reactorChild) kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		c.cmd.Process.Kill()
	}
	c.wait()
}

// takeReactorChild returns the child TestMain started, once.
func takeReactorChild() *reactorChild {
	pendingMu.Lock()
	defer pendingMu.Unlock()
	c := pendingReactor
	pendingReactor = nil
	return c
}

// startReactorAttacks starts TestReactorAttacks' child ahead if this run
// includes that test (by -test.run and -test.skip; when unsure, not:
// the test starts it itself). stop, deferred by TestMain, ends a child
// that was not waited for.
func startReactorAttacks() (stop func()) {
	const name = "TestReactorAttacks"
	sel := func(flagName string, empty bool) bool {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return empty
		}
		re, err := regexp.Compile(strings.Split(f.Value.String(), "/")[0])
		return err == nil && re.MatchString(name)
	}
	if os.Getenv("AGRUN_HOSTILE_REACTOR") == "1" || !sel("test.run", true) || sel("test.skip", false) || flag.Lookup("test.list").Value.String() != "" {
		return func() {}
	}
	pendingMu.Lock()
	pendingReactor = startReactorChild()
	pendingMu.Unlock()
	return func() {
		if c := takeReactorChild(); c != nil {
			c.kill()
		}
	}
}
