package runtime

import (
	"errors"
	"strconv"
)

// Sentinel errors for each way a call or a compilation can fail. Errors
// returned by this package wrap one of them (test with errors.Is) and,
// where there is one, the underlying cause: wazero's error, a context error
// (context.DeadlineExceeded for ErrTimeout, context.Canceled when the
// caller cancelled), or a *ValidationError for ErrCompile.
var (
	// ErrCompile: the module is malformed, invalid, or refused by the
	// sandbox's checks.
	ErrCompile = errors.New("module refused")
	// ErrTimeout: the call's time limit (or the caller's deadline) ended
	// it, or its fuel ran out (ErrFuelExhausted wraps it).
	ErrTimeout = errors.New("time limit exceeded")
	// ErrMemoryLimit: the guest tried to grow its memory past the limit,
	// or a Go guest reported running out of memory.
	ErrMemoryLimit = errors.New("memory limit exceeded")
	// ErrOutputLimit: the guest wrote more than MaxStdout or MaxStderr.
	ErrOutputLimit = errors.New("output limit exceeded")
	// ErrInputLimit: the input is larger than MaxStdin; nothing ran.
	ErrInputLimit = errors.New("input too large")
	// ErrTrap: the guest trapped (unreachable, out-of-bounds access,
	// division by zero, ...), its call stack passed Config.MaxStackBytes
	// ("call stack exhausted"), or the host refused a call that would have
	// crashed a host function ("the host refused a call to <function>";
	// the panic is logged, never returned).
	ErrTrap = errors.New("guest trapped")
	// ErrNotGranted: the guest called a host function it was not granted
	// (agrun.http_request without a NetworkGrant). The call fails with it
	// whatever the guest did afterwards.
	ErrNotGranted = errors.New("capability not granted")
	// ErrClosed: the Runtime or the Module was closed.
	ErrClosed = errors.New("the runtime is closed")
)

// limitError is how a call that crossed one of its Limits ends: its text
// names the limit and its value ("timeout after 1s", "stderr exceeded
// 64KiB", "memory limit 8MiB exceeded"); it matches the limit's sentinel
// and the cause with errors.Is.
type limitError struct {
	msg      string
	sentinel error
	cause    error
}

func (e *limitError) Error() string { return e.msg }

func (e *limitError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.sentinel}
	}
	return []error{e.sentinel, e.cause}
}

// FormatBytes writes n bytes the way limits are configured: "64KiB",
// "8MiB", "1GiB" when n is a whole number of such units, else "1500B".
func FormatBytes(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
