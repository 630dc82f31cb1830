//go:build wasip1

package guest

import _ "unsafe" // for go:linkname

// mainMain is the program's main function.
//
//go:linkname mainMain main.main
func mainMain()

// agrunCall is the reactor entry point of the guest ABI (ABI.md, section
// 1). A tool built with -buildmode=c-shared is a reactor: the host runs
// its _initialize (Go's start-up and the package inits) once, keeps a
// snapshot of the instance, and for each call starts a fresh instance from
// that snapshot and calls agrun_call, which runs main — and so Run — as
// _start would have. In a tool built as a command the export is present
// but unused.
//
//go:wasmexport agrun_call
func agrunCall() { mainMain() }
