// Command word_count is an example agrun tool that needs no permission: it
// counts the words, lines, characters and bytes of a text.
//
// Arguments: {"text": "..."}. Result: {"words":2,"lines":1,"chars":9,"bytes":9}.
// Lines are counted like "wc -l" plus a final line without a newline; chars
// are Unicode code points.
package main

import (
	"context"
	"strings"
	"unicode/utf8"

	guest "github.com/agcore/agrun/guest-sdk"
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

func main() {
	guest.Run(func(_ context.Context, in Args) (Result, error) {
		lines := strings.Count(in.Text, "\n")
		if in.Text != "" && !strings.HasSuffix(in.Text, "\n") {
			lines++
		}
		return Result{
			Words: len(strings.Fields(in.Text)),
			Lines: lines,
			Chars: utf8.RuneCountInString(in.Text),
			Bytes: len(in.Text),
		}, nil
	})
}
