package mcp

import (
	"errors"
	"fmt"
	"slices"
)

// MaxRoots bounds the roots a Client offers (ClientOptions.Roots,
// SetRoots).
const MaxRoots = 256

// ErrNoRootsCapability is SetRoots's error for a Client made without
// ClientOptions.Roots: it declared no roots capability, so a server
// would neither ask for roots nor hear that they changed.
var ErrNoRootsCapability = errors.New("the client declared no roots capability (no ClientOptions.Roots)")

// SetRoots replaces the roots the client offers its server (absolute
// directory paths, as ClientOptions.Roots) and, when they changed, tells
// the connected server with notifications/roots/list_changed, after
// which the server asks for them again (roots/list); a later session
// (a restart) gets them too. Roots only tell a server where to work;
// they confine nothing. At most MaxRoots; a relative path is refused
// and nothing changes. It fails with ErrNoRootsCapability for a client
// made without roots. Safe for concurrent use.
func (c *Client) SetRoots(dirs []string) error {
	if len(c.opts.Roots) == 0 {
		return ErrNoRootsCapability
	}
	if len(dirs) > MaxRoots {
		return fmt.Errorf("%d roots given, at most %d", len(dirs), MaxRoots)
	}
	roots, err := fileRoots(dirs)
	if err != nil {
		return fmt.Errorf("server %q: %w", c.name, err)
	}
	c.rootsMu.Lock()
	defer c.rootsMu.Unlock()
	var uris, gone []string
	for _, r := range roots {
		uris = append(uris, r.URI)
	}
	for _, u := range c.rootURIs {
		if !slices.Contains(uris, u) {
			gone = append(gone, u)
		}
	}
	if slices.Equal(uris, c.rootURIs) {
		return nil
	}
	// The SDK notifies every connected session of each change
	// (notifications/roots/list_changed) and answers roots/list from
	// what it holds.
	//lint:ignore SA1019 roots are offered to servers on protocol versions before 2026-07-28 (SEP-2577 deprecates them, with a 12-month window; docs/MCP.md)
	c.sdk.RemoveRoots(gone...)
	//lint:ignore SA1019 as above
	c.sdk.AddRoots(roots...)
	c.rootURIs = uris
	return nil
}
