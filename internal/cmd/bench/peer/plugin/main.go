//go:build wasip1

// Command plugin is word_count as an Extism plug-in: the same logic as
// agrun's example tool (testdata/word_count), written with the Extism Go
// PDK and built with the standard Go toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm .
//
// The bench builds it into its cache directory; no binary is committed.
// Its export word_count takes {"text": "..."} and returns
// {"words":N,"lines":N,"chars":N,"bytes":N}, exactly as agrun's tool does.
package main

import (
	"strings"
	"unicode/utf8"

	"github.com/extism/go-pdk"
)

// Args are the tool's arguments.
type Args struct {
	Text string `json:"text"`
}

// Result is the tool's answer.
type Result struct {
	Words int `json:"words"`
	Lines int `json:"lines"`
	Chars int `json:"chars"`
	Bytes int `json:"bytes"`
}

//go:wasmexport word_count
func wordCount() int32 {
	var in Args
	if err := pdk.InputJSON(&in); err != nil {
		pdk.SetError(err)
		return 1
	}
	lines := strings.Count(in.Text, "\n")
	if in.Text != "" && !strings.HasSuffix(in.Text, "\n") {
		lines++
	}
	if err := pdk.OutputJSON(Result{
		Words: len(strings.Fields(in.Text)),
		Lines: lines,
		Chars: utf8.RuneCountInString(in.Text),
		Bytes: len(in.Text),
	}); err != nil {
		pdk.SetError(err)
		return 1
	}
	return 0
}

func main() {}
