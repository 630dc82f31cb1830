//go:build !wasip1

package guest

import (
	"fmt"
	"os"
)

// exit ends the tool with the status code.
func exit(code int) { os.Exit(code) }

func hostLog(level Level, msg string) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", level, msg)
}
