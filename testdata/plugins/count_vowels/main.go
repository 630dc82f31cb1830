//go:build wasip1

// Command count_vowels is an Extism plug-in written with Extism's Go PDK:
// the example of README's "Use Extism plug-ins" and of the differential
// test (agrun and Extism's Go SDK must give the same outputs).
//
// Exports:
//   - count_vowels: {"text": "..."} -> {"count": N, "vowels": "...", "calls": N}.
//     The vowels are config "vowels" (default "aeiou"); "calls" counts the
//     calls in a var, so it shows whether vars outlive a call (in agrun
//     they never do: always 1).
//   - shout: the input as upper-case text (output = "text").
//   - fetch: {"url": "..."} -> {"status": N, "body": "..."} through http_request.
//   - fail: sets the error "no luck: <input>" and returns 1.
//   - read: {"path": "..."} -> the file's text, through WASI (Extism's
//     allowed_paths; agrun's mounts).
package main

import (
	"os"
	"strings"

	"github.com/extism/go-pdk"
)

type args struct {
	Text string `json:"text"`
	URL  string `json:"url"`
	Path string `json:"path"`
}

type result struct {
	Count  int    `json:"count"`
	Vowels string `json:"vowels"`
	Calls  int    `json:"calls"`
}

//go:wasmexport count_vowels
func countVowels() int32 {
	var in args
	if err := pdk.InputJSON(&in); err != nil {
		pdk.SetError(err)
		return 1
	}
	vowels, ok := pdk.GetConfig("vowels")
	if !ok {
		vowels = "aeiou"
	}
	n := 0
	for _, r := range strings.ToLower(in.Text) {
		if strings.ContainsRune(vowels, r) {
			n++
		}
	}
	calls := pdk.GetVarInt("calls") + 1
	pdk.SetVarInt("calls", calls)
	pdk.Log(pdk.LogInfo, "counted vowels")
	if err := pdk.OutputJSON(result{Count: n, Vowels: vowels, Calls: calls}); err != nil {
		pdk.SetError(err)
		return 1
	}
	return 0
}

//go:wasmexport shout
func shout() int32 {
	pdk.OutputString(strings.ToUpper(pdk.InputString()))
	return 0
}

//go:wasmexport fetch
func fetch() int32 {
	var in args
	if err := pdk.InputJSON(&in); err != nil {
		pdk.SetError(err)
		return 1
	}
	resp := pdk.NewHTTPRequest(pdk.MethodGet, in.URL).Send()
	out := struct {
		Status uint16 `json:"status"`
		Body   string `json:"body"`
	}{resp.Status(), string(resp.Body())}
	if err := pdk.OutputJSON(out); err != nil {
		pdk.SetError(err)
		return 1
	}
	return 0
}

//go:wasmexport fail
func fail() int32 {
	pdk.SetErrorString("no luck: " + pdk.InputString())
	return 1
}

//go:wasmexport read
func read() int32 {
	var in args
	if err := pdk.InputJSON(&in); err != nil {
		pdk.SetError(err)
		return 1
	}
	b, err := os.ReadFile(in.Path)
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.Output(b)
	return 0
}

func main() {}
