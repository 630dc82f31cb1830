// Package guest is what an agrun tool imports: it hides the guest ABI
// (see ABI.md beside this file) behind ordinary Go.
//
// A tool is built with GOOS=wasip1 GOARCH=wasm, preferably with
// -buildmode=c-shared (a reactor: the host runs Go's start-up once and
// starts every call from a snapshot; the package exports the agrun_call
// entry point, which runs main; see ABI.md, section 1.1, for what that
// means for package-level state and math/rand). Its main function hands
// one function to [Run]:
//
//	type Args struct{ Text string `json:"text"` }
//	type Result struct{ Words int `json:"words"` }
//
//	func main() {
//		guest.Run(func(ctx context.Context, in Args) (Result, error) {
//			return Result{Words: len(strings.Fields(in.Text))}, nil
//		})
//	}
//
// Run decodes the call's arguments from stdin, calls the function, and writes
// the result to stdout; an error becomes the ABI's {"error":"..."} answer and
// a non-zero exit.
//
// # Network
//
// A tool that declares the "network" permission reaches the hosts the
// operator allowed through package guesthttp
// (github.com/agcore/agrun/guest-sdk/guesthttp): guesthttp.Client() is a
// standard *http.Client whose transport calls the host function
// agrun.http_request. It is a package of its own so that a tool without
// network does not link net/http (about 2 MB of module and a second of
// compile time). Sockets are not available.
//
// # Files and logs
//
// Files are plain os calls on the paths the operator mounted (for example
// os.ReadFile("/docs/readme.md")); nothing else of the host's file system
// exists. [Log] writes to the host's log, not to the tool's output.
//
// # Host builds
//
// The package also compiles for the host's GOOS so that tool code can be
// unit-tested natively: there [Log] writes to stderr (and guesthttp's
// requests fail with guesthttp.ErrNoHost).
package guest
