// Command flood is a hand-written MCP server (no SDK) whose tool "flood"
// sends FLOOD_N (default 20000) log notifications, progress notifications
// and tools/list_changed notifications before its answer. Tool "stats"
// reports how many tools/list requests it has answered.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
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

var (
	mu  sync.Mutex
	out = bufio.NewWriterSize(os.Stdout, 1<<16)
)

func send(v any) {
	b, _ := json.Marshal(v)
	mu.Lock()
	out.Write(append(b, '\n'))
	mu.Unlock()
}

func flush() {
	mu.Lock()
	out.Flush()
	mu.Unlock()
}

func result(id json.RawMessage, r any) {
	send(map[string]any{"jsonrpc": "2.0", "id": id, "result": r})
	flush()
}

func text(s string) map[string]any {
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}}
}

func main() {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("FLOOD_N")); err == nil {
		n = v
	}
	lists := 0
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var req request
		if json.Unmarshal(sc.Bytes(), &req) != nil || req.ID == nil {
			continue
		}
		switch req.Method {
		case "initialize":
			v := req.Params.ProtocolVersion
			if v == "" {
				v = "2025-06-18"
			}
			result(req.ID, map[string]any{"protocolVersion": v,
				"capabilities": map[string]any{"tools": map[string]any{"listChanged": true}, "logging": map[string]any{}},
				"serverInfo":   map[string]any{"name": "flood", "version": "1"}})
		case "tools/list":
			lists++
			obj := map[string]any{"type": "object"}
			result(req.ID, map[string]any{"tools": []any{
				map[string]any{"name": "flood", "inputSchema": obj},
				map[string]any{"name": "stats", "inputSchema": obj},
			}})
		case "tools/call":
			if req.Params.Name == "stats" {
				result(req.ID, text(fmt.Sprint(lists)))
				continue
			}
			for i := range n {
				send(map[string]any{"jsonrpc": "2.0", "method": "notifications/message",
					"params": map[string]any{"level": "info", "data": fmt.Sprintf("log line %d", i)}})
				send(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress",
					"params": map[string]any{"progressToken": "nobody-asked", "progress": i}})
				send(map[string]any{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
			}
			result(req.ID, text("done flooding"))
		default:
			send(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
			flush()
		}
	}
}
