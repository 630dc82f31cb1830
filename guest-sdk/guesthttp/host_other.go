//go:build !wasip1

package guesthttp

// realHost stands in for the host functions in a build for the host's
// GOOS, so that tool code compiles and can be unit-tested natively: every
// request fails with ErrNoHost.
type realHost struct{}

func (realHost) httpRequest([]byte) int32  { return codeNoHostOnHost }
func (realHost) httpResponse([]byte) int32 { return codeNoPending }
