package cli

import (
	"testing"

	"github.com/agcore/agrun/internal/testing/hostile"
)

// TestMain runs a child case when the test binary is re-executed as one
// (hostile.Child), else the tests.
func TestMain(m *testing.M) { hostile.Main(m, nil) }
