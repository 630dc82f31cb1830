package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/s3store"
	"github.com/agcore/agrun/cluster/store"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/agcore/agrun/cluster/storetest"
)

// fakeS3 is an in-process S3 (gofakes3, in memory) behind an httptest
// server, with one bucket.
type fakeS3 struct {
	url     string
	backend *s3mem.Backend
	n       atomic.Int64
	// unchunked, when set, makes GETs answer without Content-Length (a
	// chunked body), as some services and proxies do.
	unchunked atomic.Bool
	lists     atomic.Int64 // ListObjectsV2 requests served
}

const testBucket = "agrun-test"

func newFakeS3(t *testing.T) *fakeS3 {
	t.Helper()
	f := &fakeS3{backend: s3mem.New()}
	if err := f.backend.CreateBucket(testBucket); err != nil {
		t.Fatal(err)
	}
	h := gofakes3.New(f.backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("list-type") == "2" {
			f.lists.Add(1)
		}
		if r.Method == http.MethodGet && f.unchunked.Load() {
			w = &noLength{ResponseWriter: w}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	t.Setenv("AGRUN_TEST_S3_KEY", "test-key-id")
	t.Setenv("AGRUN_TEST_S3_SECRET", "test-secret")
	return f
}

// noLength drops the Content-Length header, so the body goes chunked.
type noLength struct{ http.ResponseWriter }

func (n *noLength) WriteHeader(code int) {
	n.Header().Del("Content-Length")
	n.ResponseWriter.WriteHeader(code)
}

func (n *noLength) Write(b []byte) (int, error) {
	n.Header().Del("Content-Length")
	return n.ResponseWriter.Write(b)
}

func (f *fakeS3) config(prefix string) s3store.Config {
	return s3store.Config{
		Bucket: testBucket, Prefix: prefix, Endpoint: f.url, Region: "us-east-1", UsePathStyle: true,
		AccessKeyEnv: "AGRUN_TEST_S3_KEY", SecretKeyEnv: "AGRUN_TEST_S3_SECRET",
	}
}

func (f *fakeS3) put(t *testing.T, key string, data []byte) {
	t.Helper()
	if _, err := f.backend.PutObject(testBucket, key, map[string]string{}, bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatal(err)
	}
}

// store returns an Objects under a prefix of its own, in a bucket that
// also holds objects outside the prefix and ones whose names are not
// keys, and that lists two keys per page (so List reads many pages).
func (f *fakeS3) store(t *testing.T) *s3store.Objects {
	t.Helper()
	prefix := fmt.Sprintf("run/t%d", f.n.Add(1))
	f.put(t, prefix+"x/outside", []byte("a neighbour's object: same letters, other prefix"))
	f.put(t, "other/"+prefix+"/a", []byte("elsewhere"))
	f.put(t, prefix+"/NotAKey", []byte("foreign, not a key"))
	s, err := s3store.New(context.Background(), f.config(prefix))
	if err != nil {
		t.Fatal(err)
	}
	s3store.SetPageSize(s, 2)
	return s
}

func TestObjects(t *testing.T) {
	f := newFakeS3(t)
	storetest.TestObjectStore(t, func(t *testing.T) store.ObjectStore { return f.store(t) })
}

func TestS3ToolIndex(t *testing.T) {
	f := newFakeS3(t)
	storetest.TestToolIndex(t, func(t *testing.T) store.ObjectStore { return f.store(t) })
}

func TestS3Modules(t *testing.T) {
	f := newFakeS3(t)
	storetest.TestModuleStore(t, func(t *testing.T) store.ObjectStore { return f.store(t) })
}

// TestObjectsLayout: keys land under the prefix in the bucket, and a
// store without a prefix lists the whole bucket's valid keys.
func TestObjectsLayout(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	s, err := s3store.New(ctx, f.config("agrun")) // the "/" is added
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "sha256/ab.wasm", []byte("m")); err != nil {
		t.Fatal(err)
	}
	obj, err := f.backend.GetObject(testBucket, "agrun/sha256/ab.wasm", nil)
	if err != nil {
		t.Fatalf("the object is not at agrun/sha256/ab.wasm: %v", err)
	}
	obj.Contents.Close()
	f.put(t, "Top/Level", []byte("not a key"))
	f.put(t, "top", []byte("a key"))
	whole, err := s3store.New(ctx, f.config(""))
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := whole.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"agrun/sha256/ab.wasm", "top"}) {
		t.Errorf("List of the whole bucket = %q, %v", keys, err)
	}
}

// TestObjectsPages: List follows the continuation tokens to the end.
func TestObjectsPages(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	s := f.store(t) // two keys a page
	var want []string
	for i := range 7 {
		k := fmt.Sprintf("p/k%d", i)
		want = append(want, k)
		if err := s.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	before := f.lists.Load()
	keys, err := s.List(ctx, "p/")
	if err != nil || !slices.Equal(keys, want) {
		t.Fatalf("List = %q, %v; want %q", keys, err, want)
	}
	if n := f.lists.Load() - before; n != 4 {
		t.Errorf("List of 7 keys, 2 a page, made %d requests, want 4", n)
	}
}

// TestObjectsNoLength: a body without Content-Length is still capped
// by the read.
func TestObjectsNoLength(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	s := f.store(t)
	data := bytes.Repeat([]byte("z"), 100_000)
	if err := s.Put(ctx, "big", data); err != nil {
		t.Fatal(err)
	}
	f.unchunked.Store(true)
	// The message says the size only when Content-Length told it: this
	// one was found by the capped read.
	if _, err := s.Get(ctx, "big", 99_999); !errors.Is(err, store.ErrTooLarge) || strings.Contains(err.Error(), "100000") {
		t.Errorf("Get(max 99999) of a chunked 100000-byte body: %v, want ErrTooLarge from the read", err)
	}
	if got, err := s.Get(ctx, "big", 100_000); err != nil || !bytes.Equal(got, data) {
		t.Errorf("Get(max 100000) of a chunked body = %d bytes, %v", len(got), err)
	}
}

// TestNewErrors: a missing bucket, unset or half-named
// credential variables, a bad prefix and an unreachable endpoint fail at
// start with a message that says which.
func TestNewErrors(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	cases := map[string]struct {
		cfg  func(c *s3store.Config)
		want string
	}{
		"no bucket":      {func(c *s3store.Config) { c.Bucket = "" }, "no bucket"},
		"missing bucket": {func(c *s3store.Config) { c.Bucket = "nope" }, `bucket "nope" does not exist`},
		"unset variable": {func(c *s3store.Config) { c.AccessKeyEnv = "AGRUN_TEST_S3_UNSET" }, "$AGRUN_TEST_S3_UNSET and $AGRUN_TEST_S3_SECRET must both be set"},
		"one variable":   {func(c *s3store.Config) { c.SecretKeyEnv = "" }, "both"},
		"bad prefix":     {func(c *s3store.Config) { c.Prefix = "../up" }, "prefix"},
		"unreachable":    {func(c *s3store.Config) { c.Endpoint = "http://127.0.0.1:1" }, "127.0.0.1:1"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := f.config("p")
			c.cfg(&cfg)
			s, err := s3store.New(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New = %v, %v; want an error containing %q", s, err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "test-secret") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}
