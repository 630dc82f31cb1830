// Package deps pins the project's direct dependencies in go.mod while the
// packages that use them are being written, so that concurrent work does not
// race on go.mod. It is removed once every dependency has a real importer.
package deps

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "github.com/tetratelabs/wazero"
)
