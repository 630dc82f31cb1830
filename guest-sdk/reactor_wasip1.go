//go:build wasip1

package guest

import (
	"os"
	_ "unsafe" // for go:linkname
)

// mainMain is the program's main function.
//
//go:linkname mainMain main.main
func mainMain()

// inCall is set while agrun_call runs main.
var inCall bool

// callDone is the panic with which a successful Run ends agrun_call.
type callDone struct{}

// agrunCall is the reactor entry point of the guest ABI (ABI.md, section
// 1). A tool built with -buildmode=c-shared is a reactor: the host runs
// its _initialize (Go's start-up and the package inits) once, keeps a
// snapshot of the instance, and for each call starts a fresh instance from
// that snapshot and calls agrun_call, which runs main — and so Run — as
// _start would have. In a tool built as a command the export is present
// but unused.
//
//go:wasmexport agrun_call
func agrunCall() {
	inCall = true
	defer func() {
		if r := recover(); r != nil {
			if _, done := r.(callDone); !done {
				panic(r)
			}
		}
	}()
	mainMain()
}

// exit ends the tool with the status code. In agrun_call, success returns
// from agrun_call (by unwinding main) rather than calling proc_exit: the
// ABI allows both, and wazero closes the instance inside proc_exit, which
// would put the instance's teardown on the call's path.
func exit(code int) {
	if code == 0 && inCall {
		panic(callDone{})
	}
	os.Exit(code)
}
