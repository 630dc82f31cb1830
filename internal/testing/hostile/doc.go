// Package hostile holds agrun's hostile-input suite: one place where every
// kind of attacker input — guest modules, manifests, arguments, MCP servers,
// model output, HTTP peers, sessions — is thrown at the real components, and
// every case ends with the same checks: the process is alive, the failure is
// a *registry.Error of the expected Kind (what the loop hands the model), an
// honest tool still works, no goroutine, file-descriptor or memory leak, and
// nothing outside the sandbox changed.
//
// The package has no API; it is tests only. Cases that could take the
// process down run in a child process (the test binary re-executed with
// HOSTILE_CHILD set) so that the parent can check it survived.
//
//	go test ./internal/testing/hostile            # the suite
//	go test ./internal/testing/hostile -run Net   # one category
//
// docs/SECURITY.md maps each defence to the test here (or in the
// component's package) that proves it.
package hostile
