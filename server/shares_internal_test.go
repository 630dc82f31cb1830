package server

import (
	"testing"

	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/runtime"
)

// TestUploadShare: a tenant's uploads in progress are at most half of
// the server's and half of the runtime's compiles (each upload compiles
// within its slot), at least one: one tenant's uploads never hold every
// compile.
func TestUploadShare(t *testing.T) {
	for _, c := range []struct{ compiles, uploads, want int }{
		{4, 4, 2}, {2, 4, 1}, {1, 4, 1}, {8, 16, 4}, {16, 8, 4}, {4, 1, 1},
	} {
		rt := testrt.New(t, runtime.Config{MaxCompiles: c.compiles})
		if rt.MaxCompiles() != c.compiles {
			t.Fatalf("MaxCompiles() = %d, want %d", rt.MaxCompiles(), c.compiles)
		}
		if got := uploadShare(Options{Runtime: rt}, Limits{MaxConcurrentUploads: c.uploads}); got != c.want {
			t.Errorf("%d compiles, %d uploads: a tenant's share is %d, want %d", c.compiles, c.uploads, got, c.want)
		}
	}
}
