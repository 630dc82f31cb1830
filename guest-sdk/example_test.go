package guest_test

import (
	"context"
	"errors"
	"strings"

	guest "github.com/agcore/agrun/guest-sdk"
)

// A complete tool: the function's argument and result types are the call's
// arguments and result.
func ExampleRun() {
	type Args struct {
		Text string `json:"text"`
	}
	type Result struct {
		Words int `json:"words"`
	}
	guest.Run(func(ctx context.Context, in Args) (Result, error) {
		if in.Text == "" {
			return Result{}, errors.New(`"text" is empty`) // becomes {"error":"\"text\" is empty"}, exit 1
		}
		return Result{Words: len(strings.Fields(in.Text))}, nil
	})
}
