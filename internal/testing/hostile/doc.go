// Package hostile is the kit of agrun's hostile-input suite: one place where
// every kind of attacker input — guest modules, manifests, arguments, MCP
// servers, model output, HTTP peers, sessions — is thrown at the real
// components, and every case ends with the same checks: the process is
// alive, the failure is a *registry.Error of the expected Kind (what the
// loop hands the model), an honest tool still works, no goroutine,
// file-descriptor or memory leak, and nothing outside the sandbox changed.
//
// The cases are tests in three packages below this one, which go test runs
// side by side: sandbox (guests in process), peers (MCP servers, the model,
// OCI registries) and cli (the built agrun). A package's cases run one at a
// time, since the leak checks count the whole process. This package is
// what they share: a [Fixture] and its after-conditions ([Fixture.After]),
// the attacker guests and peers, and [Main], each package's TestMain: cases
// that could take the process down run in a child process (the test binary
// re-executed with HOSTILE_CHILD set: [RegisterChild], [Child]) so that
// the parent can check it survived.
//
//	go test ./internal/testing/hostile/...                 # the suite
//	go test ./internal/testing/hostile/sandbox -run Net    # one category
//
// A test kit: only tests import it (archtest). Its helpers build on Unix
// only, as the leak kit they count with does (windows cross-builds of
// ./... see this file alone). docs/SECURITY.md maps each
// defence to the test here (or in the component's package) that proves it.
package hostile
