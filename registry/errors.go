package registry

import (
	"context"
	"errors"
	"fmt"
	"github.com/agcore/agrun/permission"
)

// Kind classifies a tool failure. Kinds are stable strings: they appear in
// `--json` output, in HTTP answers and in the tool messages the model reads.
type Kind string

// The kinds of failure. Every error returned by Registry.Invoke carries one.
const (
	NotFound          Kind = "not_found"
	InvalidArguments  Kind = "invalid_arguments"
	PermissionDenied  Kind = "permission_denied"
	ExecutionFailed   Kind = "execution_failed"
	Timeout           Kind = "timeout"
	MemoryLimit       Kind = "memory_limit"
	OutputLimit       Kind = "output_limit"
	MCPError          Kind = "mcp_error"
	MCPTimeout        Kind = "mcp_timeout"
	MCPNotInitialized Kind = "mcp_not_initialized"
	IO                Kind = "io"
	// Cancelled: the caller's context was cancelled before or while the tool
	// ran. It is not in the original list of kinds; it exists so that a
	// cancelled call is told apart from a tool that failed (see
	// docs/RATIONALE.md).
	Cancelled Kind = "cancelled"
	// ModuleRefused: the tool's module was refused when it was loaded
	// (missing, unreadable, invalid, failing its sha256 pin, without a
	// manifest): every call fails with it (see [Unavailable]).
	ModuleRefused Kind = "module_refused"
	// DeniedByUser: a person (or the approval policy acting for one)
	// refused the call; the reason they gave follows in the message. The
	// loop sends it to the model as "error (denied_by_user): <reason>";
	// the run goes on.
	DeniedByUser Kind = "denied_by_user"
	Other        Kind = "other"
)

// Sentinels, one per Kind: errors.Is(err, ErrTimeout) is true for every
// *Error of Kind Timeout.
var (
	ErrNotFound          = &sentinel{NotFound}
	ErrInvalidArguments  = &sentinel{InvalidArguments}
	ErrPermissionDenied  = &sentinel{PermissionDenied}
	ErrExecutionFailed   = &sentinel{ExecutionFailed}
	ErrTimeout           = &sentinel{Timeout}
	ErrMemoryLimit       = &sentinel{MemoryLimit}
	ErrOutputLimit       = &sentinel{OutputLimit}
	ErrMCPError          = &sentinel{MCPError}
	ErrMCPTimeout        = &sentinel{MCPTimeout}
	ErrMCPNotInitialized = &sentinel{MCPNotInitialized}
	ErrIO                = &sentinel{IO}
	ErrCancelled         = &sentinel{Cancelled}
	ErrModuleRefused     = &sentinel{ModuleRefused}
	ErrDeniedByUser      = &sentinel{DeniedByUser}
	ErrOther             = &sentinel{Other}
)

type sentinel struct{ kind Kind }

func (s *sentinel) Error() string { return string(s.kind) }

// Error is the one error type of tool calls: a Kind, the tool's name and the
// cause. It matches the sentinel of its Kind with errors.Is, and unwraps to
// its cause.
type Error struct {
	Kind Kind   // what kind of failure
	Tool string // the tool's name; may be empty when no tool was involved
	Err  error  // the cause; its message is what the model is shown
}

// NewError returns an *Error of kind k for tool, wrapping err. If err is
// already an *Error it is returned unchanged, with Tool filled in if empty.
func NewError(k Kind, tool string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		if e.Tool == "" {
			c := *e
			c.Tool = tool
			return &c
		}
		return e
	}
	if err == nil {
		err = errors.New(string(k))
	}
	return &Error{Kind: k, Tool: tool, Err: err}
}

// Errorf returns an *Error of kind k for tool whose cause is
// fmt.Errorf(format, args...).
func Errorf(k Kind, tool, format string, args ...any) *Error {
	return &Error{Kind: k, Tool: tool, Err: fmt.Errorf(format, args...)}
}

// Error implements error: `tool "name": kind: message`.
func (e *Error) Error() string {
	if e.Tool == "" {
		return fmt.Sprintf("%s: %s", e.Kind, e.Message())
	}
	return fmt.Sprintf("tool %q: %s: %s", e.Tool, e.Kind, e.Message())
}

// Message returns the cause's message alone, without kind or tool name:
// what a model or a user is shown after "error (<kind>): ".
func (e *Error) Message() string {
	if e.Err == nil {
		return string(e.Kind)
	}
	return e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's Kind.
//
// Every *Error of Kind PermissionDenied also matches permission.ErrDenied,
// whoever denied the call: the policy before it ran, or the sandbox when
// the guest used a capability it was not granted (runtime.ErrNotGranted,
// which the runtime cannot tie to package permission itself).
func (e *Error) Is(target error) bool {
	if target == permission.ErrDenied {
		return e.Kind == PermissionDenied
	}
	s, ok := target.(*sentinel)
	return ok && s.kind == e.Kind
}

// KindOf returns the Kind of err: the Kind of the first *Error in its chain,
// Cancelled or Timeout for context errors, Other for anything else, and ""
// for nil.
func KindOf(err error) Kind {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	case errors.Is(err, context.Canceled):
		return Cancelled
	}
	return Other
}

// AsError returns err as an *Error for tool: unchanged if it already is one,
// else classified with KindOf.
func AsError(tool string, err error) *Error {
	if err == nil {
		return nil
	}
	return NewError(KindOf(err), tool, err)
}
