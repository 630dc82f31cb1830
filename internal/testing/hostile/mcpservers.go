//go:build unix

package hostile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// McpServer builds a misbehaving MCP server: one of mcp's own test servers
// (mcp/testdata/servers/NAME) or one of ours (testdata/mcp/NAME).
func McpServer(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(Dir, "testdata", "mcp", name)
	if _, err := os.Stat(dir); err != nil {
		dir = filepath.Join(RepoRoot, "mcp", "testdata", "servers", name)
	}
	abs, err := filepath.Abs(dir)
	Must(t, err)
	return testguest.BuildNative(t, abs)
}
