// Command holder is the guest of the memory measurement in internal/cmd/bench:
// word_count's work, then it logs "ready" through agrun.log and sleeps
// hold_ms milliseconds, so that the host can count its memory while many
// instances are in flight at once.
package main

import (
	"context"
	"strings"
	"time"

	guest "github.com/agcore/agrun/guest-sdk"
)

// Args are the tool's arguments.
type Args struct {
	Text   string `json:"text"`
	HoldMS int    `json:"hold_ms"`
}

// Result is the tool's answer.
type Result struct {
	Words int `json:"words"`
}

func main() {
	guest.Run(func(_ context.Context, in Args) (Result, error) {
		r := Result{Words: len(strings.Fields(in.Text))}
		guest.Log(guest.LevelInfo, "ready")
		time.Sleep(time.Duration(in.HoldMS) * time.Millisecond)
		return r, nil
	})
}
