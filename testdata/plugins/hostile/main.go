//go:build wasip1

// Command hostile is an Extism plug-in that abuses Extism's host
// functions, one export per attack, for internal/testing/hostile. Each
// export takes its size, address or URL from the input, {"n": "..."}
// (a decimal number or a URL), so that the tests choose it.
package main

import (
	"strconv"
	"strings"

	"github.com/extism/go-pdk"
)

//go:wasmimport extism:host/env alloc
func extAlloc(n uint64) uint64

//go:wasmimport extism:host/env load_u64
func extLoadU64(addr uint64) uint64

//go:wasmimport extism:host/env store_u64
func extStoreU64(addr, v uint64)

//go:wasmimport extism:host/env load_u8
func extLoadU8(addr uint64) uint32

//go:wasmimport extism:host/env output_set
func extOutputSet(addr, n uint64)

//go:wasmimport extism:host/env log_info
func extLogInfo(addr uint64)

//go:wasmimport extism:host/env store_u8
func extStoreU8(addr uint64, v uint32)

//go:wasmimport extism:host/env free
func extFree(addr uint64)

//go:wasmimport extism:host/env length
func extLength(addr uint64) uint64

//go:wasmimport extism:host/env input_load_u64
func extInputLoadU64(off uint64) uint64

//go:wasmimport extism:host/env error_set
func extErrorSet(addr uint64)

//go:wasmimport extism:host/env config_get
func extConfigGet(addr uint64) uint64

//go:wasmimport extism:host/env var_get
func extVarGet(addr uint64) uint64

//go:wasmimport extism:host/env var_set
func extVarSet(key, value uint64)

//go:wasmimport extism:host/env http_request
func extHTTPRequest(req, body uint64) uint64

//go:wasmimport extism:host/env http_status_code
func extHTTPStatusCode() int32

//go:wasmimport extism:host/env http_headers
func extHTTPHeaders() uint64

// arg is the input's "n".
func arg() string {
	var in struct {
		N string `json:"n"`
	}
	pdk.InputJSON(&in)
	return in.N
}

func number() uint64 {
	n, _ := strconv.ParseUint(strings.TrimSpace(arg()), 10, 64)
	return n
}

// huge_alloc allocates N bytes at once.
//
//go:wasmexport huge_alloc
func hugeAlloc() int32 {
	extAlloc(number())
	return 0
}

// many_allocs allocates 64 KiB blocks until the host stops it.
//
//go:wasmexport many_allocs
func manyAllocs() int32 {
	for {
		extAlloc(64 << 10)
	}
}

// tiny_allocs allocates 1-byte blocks until the host stops it (the block table).
//
//go:wasmexport tiny_allocs
func tinyAllocs() int32 {
	for {
		extAlloc(1)
	}
}

// load_oob reads 8 bytes at address N.
//
//go:wasmexport load_oob
func loadOOB() int32 {
	extLoadU64(number())
	return 0
}

// load_edge reads 8 bytes straddling the end of a 16-byte block.
//
//go:wasmexport load_edge
func loadEdge() int32 {
	p := extAlloc(16)
	extLoadU64(p + 12)
	return 0
}

// store_oob writes 8 bytes at address N.
//
//go:wasmexport store_oob
func storeOOB() int32 {
	extStoreU64(number(), 0xdeadbeef)
	return 0
}

// load_u8_oob reads a byte at address N.
//
//go:wasmexport load_u8_oob
func loadU8OOB() int32 {
	extLoadU8(number())
	return 0
}

// output_flood sets an output of N bytes.
//
//go:wasmexport output_flood
func outputFlood() int32 {
	n := number()
	p := extAlloc(n)
	extOutputSet(p, n)
	return 0
}

// output_lie sets an output of N bytes from a 16-byte block.
//
//go:wasmexport output_lie
func outputLie() int32 {
	p := extAlloc(16)
	extOutputSet(p, number())
	return 0
}

// log_flood logs N messages of 4 KiB.
//
//go:wasmexport log_flood
func logFlood() int32 {
	msg := strings.Repeat("x", 4<<10)
	for i := uint64(0); i < number(); i++ {
		pdk.Log(pdk.LogError, msg)
	}
	pdk.OutputString("done")
	return 0
}

// log_bad logs from address N.
//
//go:wasmexport log_bad
func logBad() int32 {
	extLogInfo(number())
	return 0
}

// var_flood sets vars of 64 KiB until the host stops it.
//
//go:wasmexport var_flood
func varFlood() int32 {
	v := make([]byte, 64<<10)
	for i := 0; ; i++ {
		pdk.SetVar("k"+strconv.Itoa(i), v)
	}
}

// config_flood reads config "big" N times without freeing it.
//
//go:wasmexport config_flood
func configFlood() int32 {
	for i := uint64(0); i < number(); i++ {
		pdk.GetConfig("big")
	}
	pdk.OutputString("done")
	return 0
}

// http_get requests the URL in the input.
//
//go:wasmexport http_get
func httpGet() int32 {
	resp := pdk.NewHTTPRequest(pdk.MethodGet, arg()).Send()
	pdk.OutputString(strconv.Itoa(int(resp.Status())))
	return 0
}

// store_u8_oob writes a byte at address N.
//
//go:wasmexport store_u8_oob
func storeU8OOB() int32 {
	extStoreU8(number(), 0xff)
	return 0
}

// free_abuse frees address N, 0 and a block twice, then allocates two
// blocks of that size: "distinct" if they are (a double free did not
// hand one block out twice), and the length the host reports for N.
//
//go:wasmexport free_abuse
func freeAbuse() int32 {
	n := number()
	extFree(n)
	extFree(0)
	p := extAlloc(32)
	extFree(p)
	extFree(p)
	a, b := extAlloc(32), extAlloc(32)
	answer := "aliased"
	if a != b {
		answer = "distinct"
	}
	pdk.OutputString(answer + " " + strconv.FormatUint(extLength(n), 10))
	return 0
}

// input_oob reads 8 input bytes at offset N.
//
//go:wasmexport input_oob
func inputOOB() int32 {
	extInputLoadU64(number())
	return 0
}

// error_flood sets an error of N bytes meant for a terminal, and fails.
//
//go:wasmexport error_flood
func errorFlood() int32 {
	msg := "\x1b[31mred\x1b]0;title\x07\u202e"
	msg += strings.Repeat("e", max(0, int(number())-len(msg)))
	m := pdk.AllocateString(msg)
	extErrorSet(m.Offset())
	return 1
}

// error_bad sets the error from address N, and fails.
//
//go:wasmexport error_bad
func errorBad() int32 {
	extErrorSet(number())
	return 1
}

// config_bad reads config with its key at address N.
//
//go:wasmexport config_bad
func configBad() int32 {
	extConfigGet(number())
	return 0
}

// var_get_bad reads a var with its key at address N.
//
//go:wasmexport var_get_bad
func varGetBad() int32 {
	extVarGet(number())
	return 0
}

// var_set_bad sets var "k" from the value at address N.
//
//go:wasmexport var_set_bad
func varSetBad() int32 {
	k := pdk.AllocateString("k")
	extVarSet(k.Offset(), number())
	return 0
}

// http_no_request asks for a response's status and headers before any
// request.
//
//go:wasmexport http_no_request
func httpNoRequest() int32 {
	pdk.OutputString(strconv.Itoa(int(extHTTPStatusCode())) + " " + strconv.FormatUint(extHTTPHeaders(), 10))
	return 0
}

// http_bad_json sends a request block that is not JSON.
//
//go:wasmexport http_bad_json
func httpBadJSON() int32 {
	m := pdk.AllocateString(`{"url": nope`)
	extHTTPRequest(m.Offset(), 0)
	return 0
}

// http_bad_addr sends a request from address N.
//
//go:wasmexport http_bad_addr
func httpBadAddr() int32 {
	extHTTPRequest(number(), 0)
	return 0
}

// http_flood requests the URL in the input 100 times.
//
//go:wasmexport http_flood
func httpFlood() int32 {
	u := arg()
	for range 100 {
		pdk.NewHTTPRequest(pdk.MethodGet, u).Send()
	}
	pdk.OutputString("done")
	return 0
}

// http_big_body posts 2 MiB to the URL in the input.
//
//go:wasmexport http_big_body
func httpBigBody() int32 {
	resp := pdk.NewHTTPRequest(pdk.MethodPost, arg()).SetBody(make([]byte, 2<<20)).Send()
	pdk.OutputString(strconv.Itoa(int(resp.Status())))
	return 0
}

// http_header_flood sends the URL in the input 10,000 headers of 100
// bytes (a 1.3 MB request).
//
//go:wasmexport http_header_flood
func httpHeaderFlood() int32 {
	req := pdk.NewHTTPRequest(pdk.MethodGet, arg())
	v := strings.Repeat("v", 100)
	for i := range 10000 {
		req.SetHeader("x-h"+strconv.Itoa(i), v)
	}
	resp := req.Send()
	pdk.OutputString(strconv.Itoa(int(resp.Status())))
	return 0
}

// alloc_then_grow allocates N bytes through Extism, then N bytes of its
// own memory.
//
//go:wasmexport alloc_then_grow
func allocThenGrow() int32 {
	n := number()
	extAlloc(n)
	b := make([]byte, n)
	for i := range b {
		b[i] = 1
	}
	pdk.OutputString(strconv.Itoa(len(b)))
	return 0
}

// listings are list_tools' answers, by config "list".
var listings = map[string]func() string{
	// flood: more tools than agrun takes (its MaxPluginTools is 256).
	"flood": func() string {
		var b strings.Builder
		b.WriteString(`{"tools":[`)
		for i := range 300 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"name":"t` + strconv.Itoa(i) + `","inputSchema":{"type":"object"}}`)
		}
		return b.String() + `]}`
	},
	// dup: two names that map to one registry name.
	"dup": func() string { return `{"tools":[{"name":"a.b"},{"name":"a_b"}]}` },
	// bigschema: a schema over agrun's schema size limit (64 KiB).
	"bigschema": func() string {
		return `{"tools":[{"name":"big","inputSchema":{"type":"object","description":"` + strings.Repeat("x", 70<<10) + `"}}]}`
	},
	// badschema: a schema that does not compile.
	"badschema": func() string { return `{"tools":[{"name":"bad","inputSchema":{"type":5}}]}` },
	// bomb: a small schema whose validation cost explodes: each of 16
	// definitions tries the previous one three times (3^16 visits).
	"bomb": func() string {
		var b strings.Builder
		b.WriteString(`{"tools":[{"name":"bomb","inputSchema":{"type":"object","properties":{"x":{"$ref":"#/$defs/d16"}},"$defs":{"d0":{"type":"string"}`)
		for i := 1; i <= 16; i++ {
			p := `{"$ref":"#/$defs/d` + strconv.Itoa(i-1) + `"}`
			b.WriteString(`,"d` + strconv.Itoa(i) + `":{"anyOf":[` + p + `,` + p + `,` + p + `]}`)
		}
		return b.String() + `}}}]}`
	},
	// notjson: an answer that is not JSON.
	"notjson": func() string { return `tools: none` },
	// huge: an answer over the output limit.
	"huge": func() string { return `{"tools":[],"pad":"` + strings.Repeat("x", 8<<20) + `"}` },
	// evil: a name, a description and schema text meant for a terminal
	// or to hide instructions from a reader.
	"evil": func() string {
		return `{"tools":[{"name":"e\u001b[31mvil\u202e","description":"ok\u001b]0;pwned\u0007 \u200bhidden` + strings.Repeat("d", 10<<10) +
			`","inputSchema":{"type":"object","properties":{"x":{"type":"string","description":"\u001b[2Jx"}}}}]}`
	},
	// empty: no tools.
	"empty": func() string { return `{"tools":[]}` },
	// fine: one tool, "t", taking anything.
	"fine": func() string {
		return `{"tools":[{"name":"t","description":"a tool","inputSchema":{"type":"object"}}]}`
	},
}

// answers are call_tool's answers, by config "call".
var answers = map[string]func() string{
	"ansi_error": func() string {
		return `{"isError":true,"content":[{"type":"text","text":"\u001b[31mred\u001b[0m \u202eevil` + strings.Repeat("e", 10<<10) + `"}]}`
	},
	"ansi_text":       func() string { return `{"content":[{"type":"text","text":"\u001b]0;title\u0007hi"}]}` },
	"ansi_structured": func() string { return `{"structuredContent":{"k\u001b[1m":"v\u0000\u202e"},"content":[]}` },
	"notjson":         func() string { return `content` },
	"image": func() string {
		return `{"content":[{"type":"image","mimeType":"image/png","data":"` + strings.Repeat("A", 4096) + `"}]}`
	},
	"huge": func() string { return `{"content":[{"type":"text","text":"` + strings.Repeat("x", 8<<20) + `"}]}` },
}

//go:wasmexport list_tools
func listTools() int32 {
	mode, _ := pdk.GetConfig("list")
	f, ok := listings[mode]
	if !ok {
		f = listings["fine"]
	}
	pdk.OutputString(f())
	return 0
}

//go:wasmexport call_tool
func callTool() int32 {
	mode, _ := pdk.GetConfig("call")
	f, ok := answers[mode]
	if !ok {
		pdk.OutputString(`{"content":[{"type":"text","text":"fine"}]}`)
		return 0
	}
	pdk.OutputString(f())
	return 0
}

func main() {}
