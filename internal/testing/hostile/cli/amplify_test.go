package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/testing/syncbuf"
	"github.com/agcore/agrun/internal/wasmbin"
)

// maxCompileGrowth bounds what refusing the amplification module may
// cost a process at its peak: the upload itself (14 MB, read whole) and
// its parse, never its metered form (about 190 MB) or wazero's compile
// of it (gigabytes). Before Compile measured the metered code first,
// `agrun call` peaked at 1.83 GB over 9 s, serve grew by 1.8 GiB.
const maxCompileGrowth = 64 << 20

// amplifier is issue 27's module: two bodies of 7,000,000 bytes of
// `call 0` each (under the body limit, the module under max_upload),
// which metering would grow 13.5 times.
func amplifier(t testing.TB) []byte {
	t.Helper()
	body := []byte{0} // no locals
	body = append(body, bytes.Repeat([]byte{0x10, 0x00}, (7_000_000-2)/2)...)
	body = append(body, 0x0b)
	sec := func(out []byte, id byte, p []byte) []byte {
		out = append(out, id)
		out = wasmbin.AppendU32(out, uint32(len(p)))
		return append(out, p...)
	}
	out := []byte(wasmbin.Header)
	out = sec(out, wasmbin.SecType, []byte{1, 0x60, 0, 0})
	out = sec(out, wasmbin.SecFunction, []byte{2, 0, 0})
	out = sec(out, wasmbin.SecMemory, []byte{1, 0, 1})
	out = sec(out, wasmbin.SecExport, []byte{2, 6, 'm', 'e', 'm', 'o', 'r', 'y', wasmbin.KindMemory, 0, 6, '_', 's', 't', 'a', 'r', 't', wasmbin.KindFunc, 0})
	code := wasmbin.AppendU32(nil, 2)
	for range 2 {
		code = wasmbin.AppendU32(code, uint32(len(body)))
		code = append(code, body...)
	}
	out = sec(out, wasmbin.SecCode, code)
	return hostile.Pack(t, out, "amplifier")
}

// TestCompileAmplificationCLI: `agrun call --json` of the amplification
// module answers module_refused, naming the function and the limit,
// with its peak RSS (the child's VmHWM, from its rusage) within
// maxCompileGrowth of an ordinary call's.
func TestCompileAmplificationCLI(t *testing.T) {
	wasm := amplifier(t)
	path := hostile.WriteTemp(t, "amplifier.wasm", wasm)
	e := hostile.NewCLIEnv(t, "", fmt.Sprintf("\n[tools.amplifier]\nwasm = %q\n", path))
	peak := func(args ...string) (hostile.CLIResult, int64, time.Duration) {
		t.Helper()
		cmd := exec.Command(hostile.AgrunBinary(t), append([]string{"-c", e.Config}, args...)...)
		cmd.Env = append(os.Environ(), "HOSTILE_TEST_KEY=k")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		cmd.Run()
		d := time.Since(start)
		if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
			t.Fatalf("agrun %v did not exit normally: %v\nstderr: %s", args, cmd.ProcessState, hostile.Truncate(errb.String(), 2000))
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return hostile.CLIResult{Stdout: out.Bytes(), Stderr: errb.Bytes(), Code: cmd.ProcessState.ExitCode()}, ru.Maxrss << 10, d
	}
	// The baseline: the same process answering a refusal that costs
	// nothing (a declared memory over the limit).
	_, base, _ := peak("call", "--json", "broken_bigmin", "{}")
	r, got, d := peak("call", "--json", "amplifier", "{}")
	var res struct {
		OK    bool `json:"ok"`
		Error struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Stdout, &res); err != nil || res.OK || res.Error.Kind != "module_refused" {
		t.Fatalf("call amplifier: exit %d, %q (%v)\n%s", r.Code, r.Stdout, err, hostile.Truncate(string(r.Stderr), 2000))
	}
	for _, want := range []string{"function 0", "once metered", "over the limit"} {
		if !strings.Contains(res.Error.Message, want) {
			t.Errorf("message %q does not say %q", res.Error.Message, want)
		}
	}
	t.Logf("refused in %v, peak RSS %d MiB (an ordinary refusal: %d MiB): %s", d.Round(time.Millisecond), got>>20, base>>20, res.Error.Message)
	if got > base+maxCompileGrowth {
		t.Errorf("agrun call peaked at %d MiB, %d MiB over an ordinary refusal's %d MiB (bound %d MiB)", got>>20, (got-base)>>20, base>>20, maxCompileGrowth>>20)
	}
}

// TestCompileAmplificationServe: an upload of the amplification module
// to `agrun serve` answers 422 module_refused, and the server's peak RSS
// (VmHWM, reset before: /proc/PID/clear_refs) passes its RSS before by
// no more than maxCompileGrowth; four such uploads at once (those the
// server takes: it may answer busy) by no more than four uploads' bytes
// more.
func TestCompileAmplificationServe(t *testing.T) {
	wasm := amplifier(t)
	e := hostile.NewCLIEnv(t, "", fmt.Sprintf("\n[serve]\ndata_dir = %q\n", filepath.Join(t.TempDir(), "serve")))
	var stderr syncbuf.Buffer
	base, cmd := startServe(t, e, &stderr)
	status := func(field string) int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		hostile.Must(t, err)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, field+":"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
				return kb << 10
			}
		}
		t.Fatalf("no %s", field)
		return 0
	}
	client := &http.Client{Timeout: time.Minute}
	upload := func() (refused, busy bool) {
		resp, err := client.Post(base+"/v1/tools", "application/wasm", bytes.NewReader(wasm))
		if err != nil {
			t.Errorf("upload: %v", err)
			return false, false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var res struct {
			Error struct {
				Kind    string `json:"kind"`
				Message string `json:"message"`
			} `json:"error"`
		}
		json.Unmarshal(b, &res)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests && res.Error.Kind == "busy":
			return false, true
		case resp.StatusCode != http.StatusUnprocessableEntity || res.Error.Kind != "module_refused" || !strings.Contains(res.Error.Message, "once metered"):
			t.Errorf("upload: %d %s (server stderr: %s)", resp.StatusCode, hostile.Truncate(string(b), 300), hostile.Truncate(stderr.String(), 2000))
		}
		return true, false
	}
	for _, n := range []int{1, 4} {
		rss := status("VmRSS")
		hostile.Must(t, os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", cmd.Process.Pid), []byte("5"), 0))
		start := time.Now()
		var refused, busy atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, b := upload()
				if r {
					refused.Add(1)
				}
				if b {
					busy.Add(1)
				}
			}()
		}
		wg.Wait()
		d, peak := time.Since(start), status("VmHWM")
		t.Logf("%d uploads of %d MB at once: %d refused, %d busy in %v; server RSS %d MiB before, peak %d MiB (+%d MiB)",
			n, len(wasm)>>20, refused.Load(), busy.Load(), d.Round(time.Millisecond), rss>>20, peak>>20, (peak-rss)>>20)
		if refused.Load() == 0 {
			t.Fatalf("no upload reached the compile")
		}
		if bound := int64(n-1)*int64(len(wasm)) + maxCompileGrowth; peak-rss > bound {
			t.Errorf("%d uploads at once: the server's peak RSS passed its RSS before by %d MiB (bound %d MiB)", n, (peak-rss)>>20, bound>>20)
		}
	}
}
