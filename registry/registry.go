// Package registry holds the tools an agent may call, whatever they are
// (WASM modules, MCP servers, Go functions), and is the one door every call
// goes through: look up, permission check, argument validation, execution.
//
//	reg := registry.New(registry.WithPermissionChecker(permission.NewChecker(permission.DefaultConfig())))
//	if err := reg.Register(myTool); err != nil { ... }
//	inv := reg.Invoke(ctx, "word_count", json.RawMessage(`{"text":"a b"}`))
//	if inv.Err != nil {
//		fmt.Println(registry.KindOf(inv.Err)) // e.g. invalid_arguments
//	}
//
// Every failure is a *Error with a stable Kind; a tool that panics becomes
// an execution_failed error and the process lives. A Registry is safe for
// concurrent use: tools may be registered and unregistered while calls run
// (a call in flight finishes on the tool it looked up).
package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
)

// Tool is anything the model can call. Implementations must be safe for
// concurrent use: the registry may run several calls of one tool at once.
type Tool interface {
	// Name is the tool's unique name, matching ^[a-zA-Z0-9_-]{1,64}$.
	Name() string
	// Description tells the model what the tool does.
	Description() string
	// Parameters is the JSON Schema (an object schema) of the arguments.
	Parameters() json.RawMessage
	// Permissions lists what the tool declares it needs; may be empty.
	Permissions() []permission.Permission
	// Execute runs the tool on arguments that have been validated against
	// Parameters. It should return a *Error (any other error is classified
	// with KindOf) and must return promptly once ctx is done.
	Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

// Unavailable is implemented by a registered tool that cannot run, such
// as one whose module failed to load: while Unavailable returns an error,
// Invoke fails with it (as a *Error; a plain error is classified with
// KindOf) before any other check, Allowed returns it, and Definitions
// leaves the tool out. List, Get and Len still include it, so that a
// listing can show the tool and why it is unavailable.
type Unavailable interface {
	Unavailable() error
}

// unavailable returns t's Unavailable error, if any.
func unavailable(t Tool) error {
	if u, ok := t.(Unavailable); ok {
		if err := u.Unavailable(); err != nil {
			return AsError(t.Name(), err)
		}
	}
	return nil
}

// Definition is what the model sees of a tool.
type Definition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Call is one requested tool call. ID is the caller's (the model's
// tool_call_id) and is copied to the Invocation.
type Call struct {
	ID   string
	Name string
	Args json.RawMessage
	// Context, if set, is the context this call runs in instead of the
	// one given to InvokeEach (InvokeAll), meant to derive from it; the
	// end of InvokeEach's context ends it either way. It carries what is
	// the call's own, such as the span its tool's requests are children
	// of (loop.Hooks.ToolContext).
	Context context.Context
}

// Invocation is the record of one call: what was asked, what came back, and
// how long it took. Exactly one of Output and Err is set.
type Invocation struct {
	ID       string          // Call.ID, if any
	Tool     string          // the tool name as called
	Input    json.RawMessage // the arguments as given (empty means {})
	Output   json.RawMessage // the result, when Err is nil
	Err      error           // a *Error, when the call failed
	Duration time.Duration   // time spent in Invoke
	// Audit is what the call did, when the tool reports it (an
	// AuditedTool that ran); nil otherwise.
	Audit *Audit
}

// NamePattern is the rule every tool name follows, as a regular
// expression (it is also what OpenAI accepts as a function name). Use
// [ValidName] to check a name; the pattern is for messages.
const NamePattern = `^[a-zA-Z0-9_-]{1,64}$`

var namePattern = regexp.MustCompile(NamePattern)

// ValidName reports whether name may be a tool's name: it matches
// [NamePattern]. It is the one check of that rule; wasmtools (manifests)
// and the CLI's configuration (tool and server names) use it too.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// ErrInvalidName, ErrDuplicate: registration errors (wrapped).
var (
	ErrInvalidName = errors.New("invalid tool name (want " + NamePattern + ")")
	ErrDuplicate   = errors.New("tool already registered")
)

// Option configures a Registry.
type Option func(*Registry)

// WithPermissionChecker makes every call pass c.Check first. Without it no
// permission check is made.
func WithPermissionChecker(c *permission.Checker) Option {
	return func(r *Registry) { r.checker = c }
}

// WithMaxParallel bounds how many calls InvokeAll runs at once. n <= 0 means
// the default, 4 × GOMAXPROCS.
func WithMaxParallel(n int) Option {
	return func(r *Registry) {
		if n > 0 {
			r.maxParallel = n
		}
	}
}

// WithMaxArgsBytes caps the size of one call's arguments. n <= 0 means the
// default, DefaultMaxArgsBytes (1 MiB).
func WithMaxArgsBytes(n int) Option {
	return func(r *Registry) {
		if n > 0 {
			r.maxArgs = n
		}
	}
}

// Registry is a set of tools keyed by name. The zero value is not usable;
// call New. A Registry is safe for concurrent use.
type Registry struct {
	checker     *permission.Checker
	maxParallel int
	maxArgs     int

	mu    sync.RWMutex
	tools map[string]*entry
}

type entry struct {
	tool   Tool
	schema *Schema
	perms  []permission.Permission
}

// New returns an empty Registry. A Registry made without
// WithPermissionChecker checks no permission: every registered tool runs,
// whatever it declares. Give it a checker (permission.NewChecker) to apply
// a policy.
func New(opts ...Option) *Registry {
	r := &Registry{
		maxParallel: 4 * runtime.GOMAXPROCS(0),
		maxArgs:     DefaultMaxArgsBytes,
		tools:       map[string]*entry{},
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Checker returns the registry's permission checker, or nil.
func (r *Registry) Checker() *permission.Checker { return r.checker }

// Register adds t. It fails, adding nothing, if the name is invalid or
// already taken, or the parameters schema is invalid (see CompileSchema).
func (r *Registry) Register(t Tool) error {
	e, err := newEntry(t)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[e.tool.Name()]; dup {
		return fmt.Errorf("%q: %w", e.tool.Name(), ErrDuplicate)
	}
	r.tools[e.tool.Name()] = e
	return nil
}

// Replace registers t, atomically replacing any tool of the same name, and
// returns the old tool if there was one. Calls in flight finish on the tool
// they looked up.
func (r *Registry) Replace(t Tool) (old Tool, err error) {
	e, err := newEntry(t)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if o, ok := r.tools[e.tool.Name()]; ok {
		old = o.tool
	}
	r.tools[e.tool.Name()] = e
	return old, nil
}

func newEntry(t Tool) (*entry, error) {
	if t == nil {
		return nil, errors.New("nil tool")
	}
	name := t.Name()
	if !ValidName(name) {
		return nil, fmt.Errorf("%q: %w", textsafe.Truncate(name, 80), ErrInvalidName)
	}
	s, err := CompileSchema(t.Parameters())
	if err != nil {
		return nil, fmt.Errorf("%q: %w", name, err)
	}
	return &entry{tool: t, schema: s, perms: slices.Clone(t.Permissions())}, nil
}

// RegisterAll registers each tool in order. It stops at the first error and
// keeps the tools registered before it; the error says which tool failed.
func (r *Registry) RegisterAll(ts []Tool) error {
	for _, t := range ts {
		if err := r.Register(t); err != nil {
			return err
		}
	}
	return nil
}

// Unregister removes the tool called name and returns it.
func (r *Registry) Unregister(name string) (Tool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.tools[name]
	if !ok {
		return nil, false
	}
	delete(r.tools, name)
	return e.tool, true
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	if !ok {
		return nil, false
	}
	return e.tool, true
}

// Subset returns a registry of the tools of r whose names keep accepts,
// with r's permission checker and limits: what a run that offers only
// some tools (agrun run --tools on a cluster's worker) calls them with. The
// tools are shared, not copied; later changes to r do not reach it.
func (r *Registry) Subset(keep func(name string) bool) *Registry {
	sub := &Registry{checker: r.checker, maxParallel: r.maxParallel, maxArgs: r.maxArgs, tools: map[string]*entry{}}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for n, e := range r.tools {
		if keep(n) {
			sub.tools[n] = e
		}
	}
	return sub
}

// List returns the names of all tools, sorted.
func (r *Registry) List() []string {
	r.mu.RLock()
	names := make([]string, 0, len(r.tools))
	for n := range r.tools {
		names = append(names, n)
	}
	r.mu.RUnlock()
	slices.Sort(names)
	return names
}

// Len returns the number of registered tools.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.tools)
}

// Definitions returns what the model sees of every tool it could call,
// sorted by name: tools the permission policy denies, and [Unavailable]
// ones, are left out (offering a tool whose every call fails only wastes
// the model's turns; List still names them).
func (r *Registry) Definitions() []Definition {
	r.mu.RLock()
	defs := make([]Definition, 0, len(r.tools))
	for _, e := range r.tools {
		if unavailable(e.tool) != nil || r.checker.Check(e.tool.Name(), e.perms) != nil {
			continue
		}
		defs = append(defs, Definition{Name: e.tool.Name(), Description: e.tool.Description(), Parameters: e.schema.Raw()})
	}
	r.mu.RUnlock()
	slices.SortFunc(defs, func(a, b Definition) int { return strings.Compare(a.Name, b.Name) })
	return defs
}

// Allowed reports whether the tool called name may run (nil): the
// [Unavailable] error of a tool that cannot, else the permission policy's
// denial. It does not run the tool.
func (r *Registry) Allowed(name string) error {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return Errorf(NotFound, name, "no tool named %q", textsafe.Truncate(name, 80))
	}
	if err := unavailable(e.tool); err != nil {
		return err
	}
	if err := r.checker.Check(name, e.perms); err != nil {
		return NewError(PermissionDenied, name, err)
	}
	return nil
}

// Invoke calls the tool called name with args: look up, permission check,
// argument validation, execution, in that order; the tool never runs after a
// failed check. The Invocation's Err is nil or a *Error. Invoke never
// panics on a tool's behalf.
func (r *Registry) Invoke(ctx context.Context, name string, args json.RawMessage) Invocation {
	return r.invoke(ctx, Call{Name: name, Args: args})
}

func (r *Registry) invoke(ctx context.Context, c Call) (inv Invocation) {
	start := time.Now()
	inv = Invocation{ID: c.ID, Tool: c.Name, Input: c.Args}
	defer func() { inv.Duration = time.Since(start) }()

	out, audit, err := r.call(ctx, c)
	inv.Audit = audit
	if err != nil {
		inv.Err = err
		return inv
	}
	inv.Output = out
	return inv
}

func (r *Registry) call(ctx context.Context, c Call) (json.RawMessage, *Audit, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, NewError(KindOf(err), c.Name, err)
	}
	r.mu.RLock()
	e, ok := r.tools[c.Name]
	r.mu.RUnlock()
	if !ok {
		return nil, nil, Errorf(NotFound, c.Name, "no tool named %q", textsafe.Truncate(c.Name, 80))
	}
	if err := unavailable(e.tool); err != nil {
		return nil, nil, err
	}
	if err := r.checker.Check(c.Name, e.perms); err != nil {
		return nil, nil, NewError(PermissionDenied, c.Name, err)
	}
	args, err := r.validate(ctx, e, c.Args)
	if err != nil {
		return nil, nil, validationError(c.Name, err)
	}
	out, audit, err := execute(ctx, e.tool, args)
	if err != nil {
		return nil, audit, AsError(c.Name, err)
	}
	if ctx.Err() != nil && out == nil {
		return nil, audit, AsError(c.Name, ctx.Err())
	}
	if out == nil {
		out = json.RawMessage("null")
	}
	return out, audit, nil
}

// ValidateArgs checks args against the tool's schema exactly as Invoke does
// and returns the arguments the tool would receive ("" becomes {}). Errors
// are *Error of kind NotFound or InvalidArguments.
func (r *Registry) ValidateArgs(name string, args json.RawMessage) (json.RawMessage, error) {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return nil, Errorf(NotFound, name, "no tool named %q", textsafe.Truncate(name, 80))
	}
	a, err := r.validate(context.Background(), e, args)
	if err != nil {
		return nil, validationError(name, err)
	}
	return a, nil
}

// validationError classifies a failed validation: the call's context
// ending it is a Timeout or Cancelled error (KindOf), anything else —
// arguments that do not match, or cost more than the validation budget —
// is InvalidArguments.
func validationError(tool string, err error) *Error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return NewError(KindOf(err), tool, err)
	}
	return NewError(InvalidArguments, tool, err)
}

// validate checks args for e as Invoke does. Validation is bounded (see
// MaxValidationSteps) and ends early once ctx is done, with ctx's error.
func (r *Registry) validate(ctx context.Context, e *entry, args json.RawMessage) (json.RawMessage, error) {
	if len(args) > r.maxArgs {
		return nil, fmt.Errorf("arguments too large: %d bytes, at most %d", len(args), r.maxArgs)
	}
	if len(bytes.TrimSpace(args)) == 0 { // no copy of args as a string
		args = json.RawMessage("{}")
	}
	if !utf8.Valid(args) {
		// The decoder would read invalid bytes as U+FFFD, but the tool gets
		// args as they are; the guest ABI promises UTF-8 JSON.
		return nil, errors.New("arguments are not valid UTF-8")
	}
	v, err := decodeStrict(args)
	if err != nil {
		return nil, err
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("arguments must be a JSON object, got %s", jsonType(v))
	}
	if err := e.schema.ValidateContext(ctx, v); err != nil {
		return nil, err
	}
	return args, nil
}

// execute runs t, turning a panic into an execution_failed error.
func execute(ctx context.Context, t Tool, args json.RawMessage) (out json.RawMessage, audit *Audit, err error) {
	defer func() {
		if p := recover(); p != nil {
			stack := debug.Stack()
			err = Errorf(ExecutionFailed, t.Name(), "tool panicked: %v\n%s", p, textsafe.Truncate(string(stack), 2048))
			out, audit = nil, nil
		}
	}()
	if at, ok := t.(AuditedTool); ok {
		return at.ExecuteAudited(ctx, args)
	}
	out, err = t.Execute(ctx, args)
	return out, nil, err
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	}
	return "an object"
}

// InvokeAll runs calls concurrently, at most MaxParallel at a time, and
// returns their invocations in the order of calls. It returns promptly when
// ctx is done: calls that have not finished by then carry a Cancelled (or
// Timeout) error, even if their tool ignores ctx and is still running in the
// background (its late result is dropped).
func (r *Registry) InvokeAll(ctx context.Context, calls []Call) []Invocation {
	return r.InvokeEach(ctx, calls, nil)
}

// InvokeEach is InvokeAll that also reports each invocation as soon as it
// is known: done(i, inv) is called once per call, with i its index in
// calls, in the order the calls finish (those cut short by ctx last), on
// the goroutine that called InvokeEach — so done may write output or emit
// events without locking. done may be nil.
func (r *Registry) InvokeEach(ctx context.Context, calls []Call, done func(i int, inv Invocation)) []Invocation {
	out := make([]Invocation, len(calls))
	if len(calls) == 0 {
		return out
	}
	type result struct {
		i   int
		inv Invocation
	}
	// Buffered for every call, so a goroutine that finishes after InvokeAll
	// returned never blocks.
	results := make(chan result, len(calls))
	sem := make(chan struct{}, r.maxParallel)
	finished := make([]bool, len(calls))
	pending := len(calls)
	report := func(i int, inv Invocation) {
		out[i] = inv
		finished[i] = true
		if done != nil {
			done(i, inv)
		}
	}
	start := time.Now()

	// The dispatcher starts calls as slots free up; it stops starting new
	// ones once ctx is done.
	go func() {
		for i, c := range calls {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				defer func() { <-sem }()
				cctx := ctx
				if c.Context != nil {
					// Its own values, and InvokeEach's end still ends
					// it, whatever context it derives from.
					var cancel context.CancelFunc
					cctx, cancel = context.WithCancel(c.Context)
					defer cancel()
					defer context.AfterFunc(ctx, cancel)()
				}
				results <- result{i, r.invoke(cctx, c)}
			}()
		}
	}()
	for pending > 0 {
		select {
		case res := <-results:
			report(res.i, res.inv)
			pending--
		case <-ctx.Done():
			// Keep the results that are already in.
			for drained := false; !drained; {
				select {
				case res := <-results:
					report(res.i, res.inv)
				default:
					drained = true
				}
			}
			err := ctx.Err()
			for i, c := range calls {
				if !finished[i] {
					report(i, Invocation{ID: c.ID, Tool: c.Name, Input: c.Args,
						Err: NewError(KindOf(err), c.Name, err), Duration: time.Since(start)})
				}
			}
			return out
		}
	}
	return out
}
