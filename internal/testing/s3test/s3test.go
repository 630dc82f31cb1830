// Package s3test runs an S3-compatible server in the test process:
// gofakes3 (MIT) with its in-memory backend behind an httptest server,
// with one bucket. Child processes of the test (agrun serve, agrun worker)
// reach it at URL with path-style addressing and the credentials in the
// standard AWS variables, which Start sets for the test.
package s3test

import (
	"net/http/httptest"
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
}

// Start starts a fake S3 with Bucket for the test, and sets
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION for it (and
// its children).
func Start(t testing.TB) *Server {
	t.Helper()
	b := s3mem.New()
	if err := b.CreateBucket(Bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(b).Server())
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test-key-id")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	t.Setenv("AWS_REGION", "us-east-1")
	return &Server{URL: srv.URL, Backend: b}
}
