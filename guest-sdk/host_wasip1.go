//go:build wasip1

package guest

import (
	"runtime"
	"unsafe"
)

// The log host function of import module "agrun", with the signature
// ABI.md fixes (the HTTP ones are in package guesthttp, so that a tool
// without network does not link net/http).

//go:wasmimport agrun log
func agrunLog(level int32, msgPtr unsafe.Pointer, msgLen uint32)

func hostLog(level Level, msg string) {
	if len(msg) == 0 {
		agrunLog(int32(level), nil, 0)
		return
	}
	agrunLog(int32(level), unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
	runtime.KeepAlive(msg)
}
