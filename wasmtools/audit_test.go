package wasmtools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/wasmtools"
)

// TestAuditReachesTheInvocation: the sandbox's record of a call travels
// into the registry's Invocation as data — the mount with its host
// directory, the path read and its bytes — and a path the guest names
// with terminal escapes arrives cleaned. A failed call has its audit too.
func TestAuditReachesTheInvocation(t *testing.T) {
	docs := t.TempDir()
	writeFile(t, docs, "readme.md", "# Hello\n")
	evil := "x\x1b]0;pwned\x07.md"
	writeFile(t, docs, evil, "e")
	tool := load(t, example(t, "read_file"), wasmtools.Grant{Mounts: []wasmtools.Mount{{Host: docs, Guest: "/docs"}}})
	r := newRegistry(t, allowing("filesystem"), tool)
	ctx := context.Background()

	inv := r.Invoke(ctx, "read_file", json.RawMessage(`{"path":"/docs/readme.md"}`))
	if inv.Err != nil {
		t.Fatalf("Invoke: %v", inv.Err)
	}
	a := inv.Audit
	if a == nil || a.Source != "wasm" || a.BytesIn == 0 || a.BytesOut == 0 || a.MemoryPeak == 0 || len(a.Mounts) != 1 {
		t.Fatalf("audit %+v", a)
	}
	m := a.Mounts[0]
	if m.Guest != "/docs" || m.Host != docs || m.Writable || m.ReadBytes != 8 || m.WrittenBytes != 0 {
		t.Fatalf("mount %+v", m)
	}
	var read *registry.PathAudit
	for i, p := range m.Paths {
		if p.Path == "/docs/readme.md" {
			read = &m.Paths[i]
		}
	}
	if read == nil || read.ReadBytes != 8 || !strings.Contains(strings.Join(read.Ops, ","), "read") {
		t.Fatalf("paths %+v", m.Paths)
	}

	inv = r.Invoke(ctx, "read_file", json.RawMessage(`{"path":`+mustJSON(t, "/docs/"+evil)+`}`))
	if inv.Err != nil {
		t.Fatalf("Invoke: %v", inv.Err)
	}
	b, _ := json.Marshal(inv.Audit)
	var decoded registry.Audit
	json.Unmarshal(b, &decoded)
	for _, p := range decoded.Mounts[0].Paths {
		if !textsafe.IsSafe(p.Path) {
			t.Fatalf("unclean path %q in the audit", p.Path)
		}
	}

	inv = r.Invoke(ctx, "read_file", json.RawMessage(`{"path":"/docs/missing"}`))
	if inv.Err == nil || inv.Audit == nil || inv.Audit.BytesIn == 0 {
		t.Fatalf("failed call: err %v, audit %+v", inv.Err, inv.Audit)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
