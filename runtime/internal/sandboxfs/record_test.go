package sandboxfs

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestRecorderHoldsNoGuestStrings: a guest that names huge paths (refused
// mkdirs on a read-only mount, recorded as "refused") leaves a recorder of
// cut copies: the guest's strings are not kept alive through it.
func TestRecorderHoldsNoGuestStrings(t *testing.T) {
	rec := &Recorder{}
	fsys, err := New(t.TempDir(), Options{Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.(interface{ Close() error }).Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n, size = 200, 256 << 10
	for i := range n {
		name := fmt.Sprintf("%08d", i) + strings.Repeat("x", size)
		if errno := fsys.Mkdir(name, 0o755); errno == 0 {
			t.Fatal("mkdir on a read-only mount worked")
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := rec.Stats()
	if st.Refused != n || len(st.Paths)+st.MorePaths != n {
		t.Fatalf("recorded %+v", st)
	}
	for _, p := range st.Paths {
		if len(p.Path) > maxRecordedPathBytes {
			t.Fatalf("a path of %d bytes kept", len(p.Path))
		}
	}
	// 200 paths cut to 1 KiB: about 200 KiB. Holding the guest's strings
	// would be 50 MiB.
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 8<<20 {
		t.Fatalf("the recorder holds %d MiB after %d refused paths of %d KiB", grown>>20, n, size>>10)
	}
	runtime.KeepAlive(rec)
}

// TestRecorderBounded100k: 100,000 distinct paths leave 64 kept paths,
// a count capped at 4,096 names and exact totals.
func TestRecorderBounded100k(t *testing.T) {
	rec := &Recorder{}
	fsys, err := New(t.TempDir(), Options{Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.(interface{ Close() error }).Close()
	const n = 100_000
	for i := range n {
		fsys.Mkdir(fmt.Sprintf("d%06d", i), 0o755) // refused: read-only
	}
	st := rec.Stats()
	if len(st.Paths) != DefaultMaxRecordedPaths || st.MorePaths != maxCountedMore || st.Refused != n {
		t.Fatalf("paths %d, more %d, refused %d", len(st.Paths), st.MorePaths, st.Refused)
	}
	rec.mu.Lock()
	kept := len(rec.paths) + len(rec.more)
	rec.mu.Unlock()
	if kept > DefaultMaxRecordedPaths+maxCountedMore {
		t.Fatalf("%d names held", kept)
	}
}
