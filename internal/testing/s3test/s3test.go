// Package s3test runs an S3-compatible server in the test process:
// gofakes3 (MIT) with its in-memory backend behind an httptest server,
// with one bucket. Child processes of the test (agrun serve, agrun worker)
// reach it at URL with path-style addressing and the credentials in the
// standard AWS variables, which Start sets for the test.
package s3test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Bucket is the bucket Start creates.
const Bucket = "agrun-test"

// Server is a running fake S3.
type Server struct {
	// URL is the endpoint (s3_endpoint), e.g. "http://127.0.0.1:41234".
	URL string
	// Backend holds the objects, for assertions.
	Backend *s3mem.Backend

	down atomic.Bool
}

// SetDown makes the server unreachable (down: every request's connection
// is closed before an answer, as when the service or the network to it
// is out) or reachable again.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Start starts a fake S3 with Bucket for the test, and sets
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION for it (and
// its children). A parallel test cannot set variables: it uses StartQuiet
// and gives its children Env.
func Start(t testing.TB) *Server {
	t.Helper()
	s := StartQuiet(t)
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return s
}

// Env is what a child process needs to reach the server: the AWS
// variables, and no shared config or credentials files that could name
// others (Credentials).
func (s *Server) Env() []string { return slices.Clone(Credentials) }

// Credentials are the AWS variables of every fake server, the same for
// each: a package whose tests reach fakes in-process may set them once
// (os.Setenv before its tests run) and keep those tests parallel.
var Credentials = []string{"AWS_ACCESS_KEY_ID=test-key-id", "AWS_SECRET_ACCESS_KEY=test-secret", "AWS_REGION=us-east-1"}

// StartQuiet starts a fake S3 with Bucket for the test without setting
// any variable (see Env).
func StartQuiet(t testing.TB) *Server {
	t.Helper()
	b := s3mem.New()
	if err := b.CreateBucket(Bucket); err != nil {
		t.Fatal(err)
	}
	s := &Server{Backend: b}
	fake := gofakes3.New(b).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}
