// Command unknownid is a hand-written MCP server (no SDK) that answers
// tools/call with responses carrying ids nobody asked for: tool "late"
// first gets a response with a wrong id, then the right one; tool "never"
// only ever gets wrong ids. It also refuses server/discover, as servers of
// older protocol versions do.
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
)

type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProtocolVersion string `json:"protocolVersion"`
		Name            string `json:"name"`
	} `json:"params"`
}

var mu sync.Mutex

func send(v any) {
	b, _ := json.Marshal(v)
	mu.Lock()
	os.Stdout.Write(append(b, '\n'))
	mu.Unlock()
}

func result(id json.RawMessage, r any) {
	send(map[string]any{"jsonrpc": "2.0", "id": id, "result": r})
}

func text(s string) map[string]any {
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}}
}

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var req request
		if json.Unmarshal(sc.Bytes(), &req) != nil || req.ID == nil {
			continue // notifications
		}
		switch req.Method {
		case "initialize":
			v := req.Params.ProtocolVersion
			if v == "" {
				v = "2025-06-18"
			}
			result(req.ID, map[string]any{"protocolVersion": v, "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "unknownid", "version": "1"}})
		case "tools/list":
			obj := map[string]any{"type": "object"}
			result(req.ID, map[string]any{"tools": []any{
				map[string]any{"name": "late", "inputSchema": obj},
				map[string]any{"name": "never", "inputSchema": obj},
			}})
		case "tools/call":
			result(json.RawMessage(`987654`), text("not yours"))
			result(json.RawMessage(`"nobody"`), text("not yours either"))
			send(map[string]any{"jsonrpc": "2.0", "id": 123456789, "error": map[string]any{"code": -32000, "message": "stray"}})
			if req.Params.Name == "late" {
				result(req.ID, text("finally"))
			}
		default:
			send(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
		}
	}
}
