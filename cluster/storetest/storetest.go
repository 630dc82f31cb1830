// Package storetest is the one test suite of the cluster stores' contracts
// (store.ObjectStore, store.SessionStore, and store.ModuleStore and
// store.ToolIndex over an object store): every implementation runs it,
// so that the directory and S3 object stores, and the in-memory,
// PostgreSQL and JSON-lines session stores, behave alike.
//
//	func TestDirObjects(t *testing.T) {
//		storetest.TestObjectStore(t, func(t *testing.T) store.ObjectStore {
//			s, err := store.NewDirObjects(t.TempDir())
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The factory is called once per subtest and must return a new, empty
// store (a fresh directory, bucket prefix or database).
package storetest

import (
	"bytes"
	"context"
	"errors"
	"github.com/agcore/agrun/cluster/store"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// badKeys are refused by every ObjectStore method.
var badKeys = []string{
	"", "/", "a/", "/a", "a//b", ".", "..", "../x", "a/../b", "a/./b", "./a",
	".hidden", "a/.tmp-x", "-a", "_a", "A", "a/B", "a b", "a\\b", "a\x00b", "é",
	"a/b/c/d/e/f/g/h/i", strings.Repeat("x", 129),
}

// badPrefixes are refused by List.
var badPrefixes = []string{"a", "/", "a//", "../", "./", "A/", "/a/", ".x/"}

// TestObjectStore runs the ObjectStore contract against the stores that
// newStore makes: round trips of any bytes, ErrNotFound, ErrTooLarge at
// Get's cap, ErrBadKey, sorted List confined to its prefix, Delete,
// concurrent Puts of one key.
func TestObjectStore(t *testing.T, newStore func(t *testing.T) store.ObjectStore) {
	ctx := context.Background()

	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		for key, data := range map[string][]byte{
			"a":                      []byte("one"),
			"sha256/x.wasm":          all,
			"blobs/sha256/0":         {},
			"deep/1/2/3/4/5/6/leaf":  bytes.Repeat([]byte("z"), 1<<20),
			strings.Repeat("k", 128): []byte(`{"json": true}`),
		} {
			if err := s.Put(ctx, key, data); err != nil {
				t.Fatalf("Put(%q): %v", key, err)
			}
			got, err := s.Get(ctx, key, 0)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get(%q) = %d bytes, %v; want the %d bytes put", key, len(got), err, len(data))
			}
		}
		// A second Put replaces (last writer wins).
		if err := s.Put(ctx, "a", []byte("two")); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, "a", 0); err != nil || string(got) != "two" {
			t.Fatalf("Get after a second Put = %q, %v; want \"two\"", got, err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		s := newStore(t)
		if err := s.Put(ctx, "dir/obj", []byte("x")); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"missing", "dir/missing", "dir", "dir/obj/below", "other/obj"} {
			if _, err := s.Get(ctx, key, 0); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Get(%q) error %v, want ErrNotFound", key, err)
			}
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		s := newStore(t)
		data := bytes.Repeat([]byte("m"), 1000)
		if err := s.Put(ctx, "big", data); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "big", 999); !errors.Is(err, store.ErrTooLarge) {
			t.Errorf("Get(max 999) of 1000 bytes: error %v, want ErrTooLarge", err)
		}
		for _, max := range []int64{1000, 1001, 0, -1} {
			if got, err := s.Get(ctx, "big", max); err != nil || len(got) != 1000 {
				t.Errorf("Get(max %d) of 1000 bytes = %d bytes, %v", max, len(got), err)
			}
		}
		if _, err := s.Get(ctx, "missing", 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(missing, max 1): error %v, want ErrNotFound", err)
		}
	})

	t.Run("BadKeys", func(t *testing.T) {
		s := newStore(t)
		for _, key := range badKeys {
			if err := s.Put(ctx, key, []byte("x")); !errors.Is(err, store.ErrBadKey) {
				t.Errorf("Put(%q) error %v, want ErrBadKey", key, err)
			}
			if _, err := s.Get(ctx, key, 0); !errors.Is(err, store.ErrBadKey) {
				t.Errorf("Get(%q) error %v, want ErrBadKey", key, err)
			}
			if err := s.Delete(ctx, key); !errors.Is(err, store.ErrBadKey) {
				t.Errorf("Delete(%q) error %v, want ErrBadKey", key, err)
			}
		}
		for _, p := range badPrefixes {
			if _, err := s.List(ctx, p); !errors.Is(err, store.ErrBadKey) {
				t.Errorf("List(%q) error %v, want ErrBadKey", p, err)
			}
		}
		if keys, err := s.List(ctx, ""); err != nil || len(keys) != 0 {
			t.Errorf("after refused Puts, List = %q, %v; want nothing", keys, err)
		}
	})

	t.Run("List", func(t *testing.T) {
		s := newStore(t)
		keys := []string{"m/b", "ma/x", "m/c/d", "n/y", "m/a", "m2/z", "m/c/a", "m-/q", "top"}
		for _, k := range keys {
			if err := s.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		for prefix, want := range map[string][]string{
			"m/":     {"m/a", "m/b", "m/c/a", "m/c/d"},
			"m/c/":   {"m/c/a", "m/c/d"},
			"ma/":    {"ma/x"},
			"m-/":    {"m-/q"},
			"none/":  nil,
			"m/a/":   nil,
			"top/":   nil,
			"":       {"m-/q", "m/a", "m/b", "m/c/a", "m/c/d", "m2/z", "ma/x", "n/y", "top"},
			"n/y/z/": nil,
		} {
			got, err := s.List(ctx, prefix)
			if err != nil {
				t.Errorf("List(%q): %v", prefix, err)
				continue
			}
			if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
				t.Errorf("List(%q) = %q, want %q", prefix, got, want)
			}
		}
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		for _, k := range []string{"d/a", "d/b", "d/sub/c", "e"} {
			if err := s.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Delete(ctx, "d/a"); err != nil {
			t.Fatalf("Delete(d/a): %v", err)
		}
		if _, err := s.Get(ctx, "d/a", 0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get after Delete: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "d/a"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("second Delete: %v, want ErrNotFound", err)
		}
		// Neither a missing key nor a folder of keys is an object.
		for _, k := range []string{"missing", "d", "d/sub", "e/below"} {
			if err := s.Delete(ctx, k); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Delete(%q): %v, want ErrNotFound", k, err)
			}
		}
		if keys, err := s.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"d/b", "d/sub/c", "e"}) {
			t.Errorf("List after Delete = %q, %v; want the other keys", keys, err)
		}
		// The key can be written again.
		if err := s.Put(ctx, "d/a", []byte("again")); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, "d/a", 0); err != nil || string(got) != "again" {
			t.Errorf("Get after Delete and Put = %q, %v", got, err)
		}
	})

	t.Run("ConcurrentPuts", func(t *testing.T) {
		s := newStore(t)
		data := bytes.Repeat([]byte("c"), 64<<10)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() { errs <- s.Put(ctx, "same/key", data) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("concurrent Put: %v", err)
			}
		}
		if got, err := s.Get(ctx, "same/key", 0); err != nil || !bytes.Equal(got, data) {
			t.Errorf("Get after concurrent Puts = %d bytes, %v", len(got), err)
		}
		if keys, err := s.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"same/key"}) {
			t.Errorf("List after concurrent Puts = %q, %v (no temporary names)", keys, err)
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		s := newStore(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Put(cctx, "a", []byte("x")); !errors.Is(err, context.Canceled) {
			t.Errorf("Put with a cancelled context: %v, want context.Canceled", err)
		}
		if _, err := s.Get(cctx, "a", 0); !errors.Is(err, context.Canceled) {
			t.Errorf("Get with a cancelled context: %v, want context.Canceled", err)
		}
		if err := s.Delete(cctx, "a"); !errors.Is(err, context.Canceled) {
			t.Errorf("Delete with a cancelled context: %v, want context.Canceled", err)
		}
	})
}

// TestModuleStore runs store.ModuleStore over the object stores that
// newStore makes: the digest it returns, the manifest beside the module
// (or none), a module whose stored bytes were changed (ErrDigest), bad
// and unknown digests, the cap, List.
func TestModuleStore(t *testing.T, newStore func(t *testing.T) store.ObjectStore) {
	ctx := context.Background()
	wasm := []byte("\x00asm\x01\x00\x00\x00 a module")
	manifest := []byte(`{"name":"word_count","version":"1.0.0"}`)

	t.Run("RoundTrip", func(t *testing.T) {
		objs := newStore(t)
		ms := store.ModuleStore{Objects: objs}
		d, err := ms.Put(ctx, wasm, manifest)
		if err != nil {
			t.Fatal(err)
		}
		if d != store.Digest(wasm) {
			t.Fatalf("Put = %s, want the module's sha256 %s", d, store.Digest(wasm))
		}
		// Where the issue says they are: sha256/<digest>.wasm with the
		// manifest beside it.
		if got, err := objs.Get(ctx, "sha256/"+d+".wasm", 0); err != nil || !bytes.Equal(got, wasm) {
			t.Errorf("object sha256/%s.wasm = %q, %v", d, got, err)
		}
		if got, err := objs.Get(ctx, "sha256/"+d+".manifest.json", 0); err != nil || !bytes.Equal(got, manifest) {
			t.Errorf("object sha256/%s.manifest.json = %q, %v", d, got, err)
		}
		gw, gm, err := ms.Get(ctx, d)
		if err != nil || !bytes.Equal(gw, wasm) || !bytes.Equal(gm, manifest) {
			t.Fatalf("Get = %q, %q, %v", gw, gm, err)
		}

		other := []byte("\x00asm\x01\x00\x00\x00 another, manifest inside")
		d2, err := ms.Put(ctx, other, nil)
		if err != nil {
			t.Fatal(err)
		}
		gw, gm, err = ms.Get(ctx, d2)
		if err != nil || !bytes.Equal(gw, other) || gm != nil {
			t.Fatalf("Get of a module without manifest = %q, %q, %v; want the module and a nil manifest", gw, gm, err)
		}
		ds, err := ms.List(ctx)
		want := []string{d, d2}
		slices.Sort(want)
		if err != nil || !slices.Equal(ds, want) {
			t.Errorf("List = %q, %v; want %q", ds, err, want)
		}
	})

	t.Run("Tampered", func(t *testing.T) {
		objs := newStore(t)
		ms := store.ModuleStore{Objects: objs}
		d, err := ms.Put(ctx, wasm, manifest)
		if err != nil {
			t.Fatal(err)
		}
		evil := bytes.Clone(wasm)
		evil[len(evil)-1] ^= 1
		if err := objs.Put(ctx, store.ModuleKey(d), evil); err != nil {
			t.Fatal(err)
		}
		if w, m, err := ms.Get(ctx, d); !errors.Is(err, store.ErrDigest) || w != nil || m != nil {
			t.Errorf("Get of a tampered module = %q, %q, %v; want nothing and ErrDigest", w, m, err)
		}
	})

	t.Run("Digests", func(t *testing.T) {
		ms := store.ModuleStore{Objects: newStore(t)}
		for _, d := range []string{"", "abc", strings.Repeat("A", 64), strings.Repeat("g", 64), "../" + strings.Repeat("a", 61), strings.Repeat("a", 65)} {
			if _, _, err := ms.Get(ctx, d); err == nil || errors.Is(err, store.ErrNotFound) {
				t.Errorf("Get(%q): error %v, want a refusal of the digest", d, err)
			}
		}
		if _, _, err := ms.Get(ctx, store.Digest([]byte("never stored"))); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get of an unknown digest: %v, want ErrNotFound", err)
		}
	})

	t.Run("Cap", func(t *testing.T) {
		ms := store.ModuleStore{Objects: newStore(t), MaxModuleBytes: int64(len(wasm) - 1)}
		d, err := ms.Put(ctx, wasm, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ms.Get(ctx, d); !errors.Is(err, store.ErrTooLarge) {
			t.Errorf("Get of a module over MaxModuleBytes: %v, want ErrTooLarge", err)
		}
	})
}

// TestToolIndex runs store.ToolIndex over the object stores that
// newStore makes: round trips of names in both key forms, last writer
// wins, ErrNotFound, ErrBadName, refused records, damaged and foreign
// objects, a sorted List and Delete.
func TestToolIndex(t *testing.T, newStore func(t *testing.T) store.ObjectStore) {
	ctx := context.Background()
	sha := func(s string) string { return store.Digest([]byte(s)) }
	when := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)

	t.Run("RoundTrip", func(t *testing.T) {
		objs := newStore(t)
		x := store.ToolIndex{Objects: objs}
		names := []string{"word_count", "a", "9-x", "Upper", "_lead", "-dash", "MiXeD_Case-1", strings.Repeat("Z", 64), strings.Repeat("z", 64)}
		for i, n := range names {
			rec := store.ToolRecord{Name: n, SHA256: sha(n), Size: int64(i), Uploaded: when.Add(time.Duration(i) * time.Second), Manifest: i%2 == 0}
			if err := x.Put(ctx, rec); err != nil {
				t.Fatalf("Put(%q): %v", n, err)
			}
			got, err := x.Get(ctx, n)
			if err != nil || got != rec {
				t.Fatalf("Get(%q) = %+v, %v; want %+v", n, got, err, rec)
			}
		}
		// Where the records are: tools/<name>.json for plain names.
		if _, err := objs.Get(ctx, "tools/word_count.json", 0); err != nil {
			t.Errorf("the record of word_count is not at tools/word_count.json: %v", err)
		}
		// Names that differ only in case are different tools.
		if got, err := x.Get(ctx, "upper"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(upper) after Put(Upper) = %+v, %v; want ErrNotFound", got, err)
		}
		recs, err := x.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(names)
		slices.Sort(want)
		var got []string
		for _, r := range recs {
			got = append(got, r.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("List names = %q, want %q", got, want)
		}
	})

	t.Run("LastWriterWins", func(t *testing.T) {
		x := store.ToolIndex{Objects: newStore(t)}
		for _, v := range []string{"v1", "v2"} {
			if err := x.Put(ctx, store.ToolRecord{Name: "t", SHA256: sha(v), Size: 2}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := x.Get(ctx, "t")
		if err != nil || got.SHA256 != sha("v2") {
			t.Errorf("Get after two Puts = %+v, %v; want the second", got, err)
		}
		if got.Uploaded.IsZero() || got.Uploaded.Location() != time.UTC {
			t.Errorf("Put with a zero Uploaded stored %v, want now in UTC", got.Uploaded)
		}
		if recs, err := x.List(ctx); err != nil || len(recs) != 1 {
			t.Errorf("List after two Puts of one name = %+v, %v", recs, err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		x := store.ToolIndex{Objects: newStore(t)}
		for _, n := range []string{"keep", "Drop"} {
			if err := x.Put(ctx, store.ToolRecord{Name: n, SHA256: sha(n)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := x.Delete(ctx, "Drop"); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Get(ctx, "Drop"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get after Delete: %v, want ErrNotFound", err)
		}
		if err := x.Delete(ctx, "Drop"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("second Delete: %v, want ErrNotFound", err)
		}
		if recs, err := x.List(ctx); err != nil || len(recs) != 1 || recs[0].Name != "keep" {
			t.Errorf("List after Delete = %+v, %v", recs, err)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		x := store.ToolIndex{Objects: newStore(t)}
		for _, n := range []string{"", "a.b", "a/b", "a b", "é", "../x", strings.Repeat("a", 65)} {
			if err := x.Put(ctx, store.ToolRecord{Name: n, SHA256: sha(n)}); !errors.Is(err, store.ErrBadName) {
				t.Errorf("Put(%q): %v, want ErrBadName", n, err)
			}
			if _, err := x.Get(ctx, n); !errors.Is(err, store.ErrBadName) {
				t.Errorf("Get(%q): %v, want ErrBadName", n, err)
			}
			if err := x.Delete(ctx, n); !errors.Is(err, store.ErrBadName) {
				t.Errorf("Delete(%q): %v, want ErrBadName", n, err)
			}
		}
		for _, rec := range []store.ToolRecord{{Name: "t"}, {Name: "t", SHA256: "abc"}, {Name: "t", SHA256: strings.ToUpper(sha("t"))}, {Name: "t", SHA256: sha("t"), Size: -1}} {
			if err := x.Put(ctx, rec); err == nil {
				t.Errorf("Put(%+v) succeeded", rec)
			}
		}
		if recs, err := x.List(ctx); err != nil || len(recs) != 0 {
			t.Errorf("after refused Puts, List = %+v, %v", recs, err)
		}
	})

	t.Run("Damaged", func(t *testing.T) {
		objs := newStore(t)
		x := store.ToolIndex{Objects: objs}
		good := store.ToolRecord{Name: "good", SHA256: sha("good"), Size: 1, Uploaded: when}
		if err := x.Put(ctx, good); err != nil {
			t.Fatal(err)
		}
		// Objects under tools/ that are not records of ours are ignored.
		for _, k := range []string{"tools/readme", "tools/a.b.json", "tools/b32.zzz1.json", "tools/b32.mfrgg.json", "tools/sub/x.json"} {
			if err := objs.Put(ctx, k, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
		if recs, err := x.List(ctx); err != nil || len(recs) != 1 || recs[0] != good {
			t.Errorf("List beside foreign objects = %+v, %v; want only the record", recs, err)
		}
		for name, data := range map[string]string{
			"other":   `{"name":"someone","sha256":"` + sha("x") + `","size":1,"uploaded":"2026-12-01T15:00:00Z","manifest":false}`,
			"badsha":  `{"name":"badsha","sha256":"nope","size":1,"uploaded":"2026-12-01T15:00:00Z","manifest":false}`,
			"extra":   `{"name":"extra","sha256":"` + sha("x") + `","size":1,"uploaded":"2026-12-01T15:00:00Z","manifest":false,"more":1}`,
			"garbage": `not json`,
		} {
			key, err := store.ToolKey(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := objs.Put(ctx, key, []byte(data)); err != nil {
				t.Fatal(err)
			}
			if rec, err := x.Get(ctx, name); err == nil || errors.Is(err, store.ErrNotFound) {
				t.Errorf("Get of a damaged record %s = %+v, %v; want an error", name, rec, err)
			}
		}
		if _, err := x.List(ctx); err == nil {
			t.Error("List with damaged records succeeded")
		}
	})

	t.Run("Tenants", func(t *testing.T) {
		objs := newStore(t)
		def := store.ToolIndex{Objects: objs}
		named := store.ToolIndex{Objects: objs, Tenant: store.DefaultTenant}
		a := store.ToolIndex{Objects: objs, Tenant: "acme"}
		b := store.ToolIndex{Objects: objs, Tenant: "beta-2"}
		for _, p := range []struct {
			x    store.ToolIndex
			name string
			sha  string
		}{{def, "x", sha("def")}, {a, "x", sha("a")}, {a, "Only_A", sha("a2")}, {b, "x", sha("b")}} {
			if err := p.x.Put(ctx, store.ToolRecord{Name: p.name, SHA256: p.sha, Size: 1, Uploaded: when}); err != nil {
				t.Fatalf("Put(%s, %q): %v", p.x.Tenant, p.name, err)
			}
		}
		// Each tenant's "x" is its own; "default" is the records of tools/.
		for _, c := range []struct {
			x   store.ToolIndex
			sha string
		}{{def, sha("def")}, {named, sha("def")}, {a, sha("a")}, {b, sha("b")}} {
			if rec, err := c.x.Get(ctx, "x"); err != nil || rec.SHA256 != c.sha {
				t.Errorf("tenant %q: Get(x) = %+v, %v; want sha %s", c.x.Tenant, rec, err, c.sha)
			}
		}
		if _, err := b.Get(ctx, "Only_A"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("tenant beta-2 reads acme's record: %v", err)
		}
		if recs, err := def.List(ctx); err != nil || len(recs) != 1 || recs[0].SHA256 != sha("def") {
			t.Errorf("default List = %+v, %v; want its one record, no tenant's", recs, err)
		}
		if recs, err := a.List(ctx); err != nil || len(recs) != 2 {
			t.Errorf("acme List = %+v, %v; want its 2 records", recs, err)
		}
		if err := a.Delete(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		if rec, err := b.Get(ctx, "x"); err != nil || rec.SHA256 != sha("b") {
			t.Errorf("acme's Delete reached beta-2's x: %+v, %v", rec, err)
		}
		for _, bad := range []string{"Acme", "a/b", "../x", "-a", strings.Repeat("a", 65), "a.b"} {
			x := store.ToolIndex{Objects: objs, Tenant: bad}
			if err := x.Put(ctx, store.ToolRecord{Name: "x", SHA256: sha("x"), Size: 1}); !errors.Is(err, store.ErrBadName) {
				t.Errorf("tenant %q: Put = %v; want ErrBadName", bad, err)
			}
			if _, err := x.List(ctx); !errors.Is(err, store.ErrBadName) {
				t.Errorf("tenant %q: List = %v; want ErrBadName", bad, err)
			}
		}
	})
}
