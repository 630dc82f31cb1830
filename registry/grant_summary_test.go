package registry_test

import (
	"fmt"

	"github.com/agcore/agrun/registry"
)

func ExampleGrant_Summary() {
	g := registry.Grant{
		Source:       "wasm",
		Mounts:       []registry.GrantMount{{Guest: "/notes", Host: "/home/me/notes", Mode: registry.ReadWrite}},
		AllowedHosts: []string{"api.example.com", "example.org"},
	}
	fmt.Println(g.Summary())
	fmt.Println(registry.Grant{Source: "mcp", Server: "fs"}.Summary())
	fmt.Println(registry.Grant{}.Summary())
	// Output:
	// /notes=/home/me/notes:rw; hosts api.example.com,example.org
	// mcp fs
	// -
}
