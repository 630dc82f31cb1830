package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/testguest"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/server"
	"github.com/agcore/agrun/wasmtools"
)

// TestMain lets the test binary act as a server process for the crash test.
func TestMain(m *testing.M) {
	if dir := os.Getenv("AGRUN_SERVER_CHILD_DIR"); dir != "" {
		childServer(dir, os.Getenv("AGRUN_SERVER_CHILD_CACHE"))
		return
	}
	os.Exit(m.Run())
}

// childServer serves dir on a loopback port, prints the address, and runs
// until killed.
func childServer(dir, cache string) {
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{CacheDir: cache})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	srv, err := server.New(ctx, server.Options{Runtime: rt, Registry: registry.New(), MaxConcurrentUploads: 16,
		DataDir: dir, UploadsPerMinute: 100000})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
	srv.Serve(ctx, ln)
}

// A server killed (SIGKILL) while uploads, replaces and deletes are under
// way leaves a data directory that a new server opens whole: every upload
// answered 201 is there, every tool of the index loads, and no file is left
// that belongs to no tool.
func TestCrashDuringUploads(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AGRUN_SERVER_CHILD_DIR="+dir, "AGRUN_SERVER_CHILD_CACHE="+testguest.CompilationCacheDir(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.HasPrefix(line, "error") {
		t.Fatalf("child server: %q %v", line, err)
	}
	url := "http://" + strings.TrimSpace(line)

	base := testguest.WAT(t, "testdata/ok.wat")
	var mods [][]byte // tool_N, version 1 and 2
	for i := 0; i < 6; i++ {
		for v := 1; v <= 2; v++ {
			mods = append(mods, pack(t, base, wasmtools.Manifest{Name: fmt.Sprintf("tool_%d", i), Version: fmt.Sprint(v), Description: "ok"}))
		}
	}
	// mustSurvive: tools whose last answered change was an upload (201)
	// and whose change cut off by the kill was an upload too: whatever
	// happened to that one, a version of the tool must be there.
	var (
		mu          sync.Mutex
		mustSurvive = map[string]bool{}
		done        atomic.Int64
		wg          sync.WaitGroup
	)
	post := func(method, path string, body []byte) int {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/wasm")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("tool_%d", g)
			acked := false
			for n := 0; ; n++ {
				var st int
				isDelete := n%3 == 2
				if isDelete {
					st = post("DELETE", "/v1/tools/"+name, nil)
				} else {
					st = post("POST", "/v1/tools?replace=true", mods[2*g+n%2])
				}
				if st < 0 { // the server is gone
					mu.Lock()
					mustSurvive[name] = acked && !isDelete
					mu.Unlock()
					return
				}
				switch st {
				case http.StatusCreated, http.StatusOK:
					acked = true
				case http.StatusNoContent:
					acked = false
				}
				done.Add(1)
			}
		}()
	}
	// Let some changes through, then kill the server mid-flight.
	for done.Load() < 40 {
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	wg.Wait()

	ts := startServer(t, setup{dataDir: dir})
	var list struct{ Tools []server.ToolInfo }
	ts.request("GET", "/v1/tools", "", nil).json(t, &list)
	listed := map[string]bool{}
	shas := map[string]bool{}
	for _, ti := range list.Tools {
		if ti.Error != "" {
			t.Errorf("tool %s did not survive the crash whole: %s", ti.Name, ti.Error)
		}
		listed[ti.Name] = true
		shas[ti.SHA256+".wasm"] = true
		if r := ts.call(ti.Name, `{}`); !r.ok() {
			t.Errorf("call %s after the crash: %d %s", ti.Name, r.status, r.body)
		}
	}
	for name, must := range mustSurvive {
		if must && !listed[name] {
			t.Errorf("tool %s: its upload was acknowledged, and it is gone after the crash", name)
		}
	}
	stored := storedTools(t, dir)
	slices.Sort(stored)
	var names []string
	for n := range listed {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(stored, names) {
		t.Errorf("index %v, listed %v", stored, names)
	}
	for _, f := range moduleFiles(t, dir) {
		if !shas[f] {
			t.Errorf("file %s belongs to no tool after the restart", f)
		}
	}
	t.Logf("%d changes before the kill; %d tools after the restart", done.Load(), len(names))
}
