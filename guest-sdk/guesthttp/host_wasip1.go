//go:build wasip1

package guesthttp

import (
	"runtime"
	"unsafe"
)

// The HTTP host functions of import module "agrun", with the signatures
// ABI.md fixes: every parameter and result is an i32 (unsafe.Pointer and
// uint32 lower to i32 on wasip1). They are declared here, not in package
// guest, so that a tool that does not make requests neither imports them
// nor links net/http.

//go:wasmimport agrun http_request
func agrunHTTPRequest(reqPtr unsafe.Pointer, reqLen uint32) int32

//go:wasmimport agrun http_response
func agrunHTTPResponse(bufPtr unsafe.Pointer, bufLen uint32) int32

// realHost calls the imported functions.
type realHost struct{}

func (realHost) httpRequest(req []byte) int32 {
	if len(req) == 0 {
		return agrunHTTPRequest(nil, 0)
	}
	n := agrunHTTPRequest(unsafe.Pointer(&req[0]), uint32(len(req)))
	runtime.KeepAlive(req)
	return n
}

func (realHost) httpResponse(buf []byte) int32 {
	if len(buf) == 0 {
		return agrunHTTPResponse(nil, 0)
	}
	n := agrunHTTPResponse(unsafe.Pointer(&buf[0]), uint32(len(buf)))
	runtime.KeepAlive(buf)
	return n
}
