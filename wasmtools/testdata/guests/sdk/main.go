// Command sdk is a tool written with the guest SDK that ends in every way
// the SDK handles, so that tests can check that a command build and a
// reactor build (-buildmode=c-shared) end the same. Arguments: {"mode":
// "ok" | "error" | "panic" | "text" | "exit3"}. Loaded under the name
// "sdk_mainpanic" (argv[0]), it panics in main before Run.
package main

import (
	"context"
	"errors"
	"os"

	guest "github.com/agcore/agrun/guest-sdk"
)

// Args select what the tool does.
type Args struct {
	Mode string `json:"mode"`
}

func main() {
	if os.Args[0] == "sdk_mainpanic" {
		panic("main panicked before Run")
	}
	guest.Run(func(_ context.Context, in Args) (any, error) {
		switch in.Mode {
		case "ok":
			return map[string]string{"result": "fine"}, nil
		case "error":
			return nil, errors.New("it went wrong")
		case "panic":
			panic("boom")
		case "text":
			return guest.Text("plain words"), nil
		case "exit3":
			os.Stdout.WriteString(`{"error":"exited on purpose"}`)
			os.Exit(3)
		}
		return nil, errors.New("unknown mode " + in.Mode)
	})
	panic("unreachable: Run returned")
}
