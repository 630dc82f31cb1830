// Package guesthttp is the HTTP client of agrun tools: [Client] returns a
// standard *http.Client whose requests the host performs (the host
// function agrun.http_request of guest-sdk/ABI.md), to the hosts the
// operator allowed and nowhere else.
//
// A tool uses it only if its manifest declares the "network" permission.
// It is separate from package guest so that a tool without network does
// not link net/http: importing guesthttp adds about 2 MB to a Go tool and
// a second to its first compile.
//
//	resp, err := guesthttp.Client().Get("https://api.open-meteo.com/v1/forecast?latitude=48.85&longitude=2.35&current_weather=true")
//	if errors.Is(err, guesthttp.ErrNotGranted) {
//		// declare "network" and ask the operator for allowed_hosts
//	}
//
// Errors match the package's sentinels with errors.Is; a refusal or
// failure reported by the host is an *[Error] carrying the ABI's code.
//
// In a build for the host's GOOS (a tool's unit tests) requests fail with
// [ErrNoHost]; pass the *http.Client into the tool's logic to test it
// against an httptest server.
package guesthttp
