package wasmtools_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/agcore/agrun/wasmtools"
)

// TestUnused: the parts of a grant a tool cannot use, with the permission
// each would need — computed once, beside Capabilities.
func TestUnused(t *testing.T) {
	ctx := context.Background()
	rt := testRuntime(t)
	load := func(file string, g wasmtools.Grant) *wasmtools.Tool {
		t.Helper()
		wasm, err := os.ReadFile("../testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		tool, err := wasmtools.Load(ctx, rt, wasm, g)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tool.Close(ctx) })
		return tool
	}
	dir := t.TempDir()
	// read_file declares filesystem and read: hosts, a writable or
	// deleting mount and allow_private are beyond it.
	rf := load("read_file.wasm", wasmtools.Grant{AllowedHosts: []string{"example.com"}, AllowPrivate: true,
		Mounts: []wasmtools.Mount{{Host: dir, Guest: "/ro"}, {Host: dir, Guest: "/rw", Writable: true}}})
	var got []string
	for _, u := range rf.Unused() {
		got = append(got, u.What+":"+u.Needs.String())
		if u.What == "write" && u.Mount != 1 {
			t.Errorf("the read-only mount is %d, want 1", u.Mount)
		}
	}
	if want := []string{"allowed_hosts:network", "write:write", "allow_private:network"}; !slices.Equal(got, want) {
		t.Errorf("read_file: %v, want %v", got, want)
	}
	if caps := rf.Capabilities(); len(caps.Mounts) != 2 || caps.Mounts[1].Writable || caps.Network != nil {
		t.Errorf("capabilities %+v", caps)
	}
	// word_count declares nothing: mounts have no effect at all.
	wc := load("word_count.wasm", wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: dir, Guest: "/x"}}})
	if u := wc.Unused(); len(u) != 1 || u[0].What != "mounts" || u[0].Needs.String() != "filesystem" {
		t.Errorf("word_count: %+v", u)
	}
	// A grant within the declaration: nothing unused.
	if u := load("read_file.wasm", wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: dir, Guest: "/ro"}}}).Unused(); len(u) != 0 {
		t.Errorf("nothing should be unused: %+v", u)
	}
}
