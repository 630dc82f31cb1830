// Package wasmtools turns a WebAssembly module into a registry.Tool: the
// module describes itself with a manifest (an "agrun.manifest" custom
// section), and the operator's Grant says what it may reach. What the guest
// gets is the intersection of what the manifest declares and what the grant
// offers — never more than either.
//
//	rt, _ := runtime.New(ctx, runtime.Config{})
//	defer rt.Close(ctx)
//	t, err := wasmtools.Load(ctx, rt, wasmBytes, wasmtools.Grant{
//		AllowedHosts: []string{"api.example.com"},
//		Limits:       runtime.Limits{Timeout: 5 * time.Second},
//	})
//	out, err := t.Execute(ctx, json.RawMessage(`{"city":"Paris"}`))
//
// A Tool is safe for concurrent use; every Execute runs in a fresh sandbox
// instance. Pack embeds a manifest in a module and Inspect describes one.
package wasmtools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/runtime"
)

// Mount offers a host directory to a tool, at Guest inside the sandbox: it
// is the sandbox's [runtime.Mount]. It is read-only unless Writable;
// AllowDelete (with Writable) permits unlink and rmdir. The tool gets it
// only if its manifest declares "filesystem"; writable only if it also
// declares "write"; deletion only if it also declares "delete". Unlike
// [runtime.Runtime.Run], Load accepts a guest path that is absolute but not
// clean and cleans it ("/docs/" is "/docs").
type Mount = runtime.Mount

// Grant is what the operator offers a tool. The zero Grant offers nothing:
// pure compute with the runtime's default limits.
//
// The network fields are those of [runtime.NetworkGrant], under the same
// names and with the same zero values; the tool gets them (as
// [Capabilities.Network]) only if its manifest declares "network" and
// AllowedHosts is not empty.
type Grant struct {
	// AllowedHosts enables agrun.http_request to these hosts (exact host
	// names, or host:port) if the manifest declares "network".
	AllowedHosts []string
	// AllowPrivate lets the allowed hosts resolve to loopback and private
	// addresses.
	AllowPrivate bool
	// MaxResponseBytes caps each response body. If zero, the runtime's
	// default (4 MiB).
	MaxResponseBytes int64
	// MaxRequests caps the requests of one call. If zero, the runtime's
	// default (16).
	MaxRequests int
	// Mounts are offered if the manifest declares "filesystem".
	Mounts []Mount
	// Limits override the runtime's defaults; zero fields keep them.
	Limits runtime.Limits
	// SHA256, if set, pins the module: lowercase hex of the whole file. A
	// module with another hash is refused ("integrity mismatch").
	SHA256 string
}

// network returns the network part of g as the sandbox takes it.
func (g Grant) network() *runtime.NetworkGrant {
	return &runtime.NetworkGrant{
		AllowedHosts:     slices.Clone(g.AllowedHosts),
		AllowPrivate:     g.AllowPrivate,
		MaxResponseBytes: g.MaxResponseBytes,
		MaxRequests:      g.MaxRequests,
	}
}

// ErrIntegrity is wrapped by Load when the module does not match Grant.SHA256.
var ErrIntegrity = errors.New("integrity mismatch")

// ErrInvalidGrant is wrapped by Load and LoadWithManifest when the grant
// cannot be honoured: an allowed host that is not a host name or
// host:port, a mount whose guest path is not absolute or is mounted twice,
// or a mount whose host path is not a directory, or a memory limit below
// the module's initial memory.
var ErrInvalidGrant = errors.New("invalid grant")

// ErrNoManifest is wrapped by Load when the module has no manifest section.
// Pack adds one; LoadWithManifest takes the manifest from elsewhere.
var ErrNoManifest = errors.New("module has no " + manifestName + " section")

// Capabilities is what a tool actually gets: declared ∩ granted.
type Capabilities struct {
	Network *runtime.NetworkGrant `json:"network,omitempty"`
	Mounts  []Mount               `json:"mounts,omitempty"`
}

// Tool is a WASM module as a registry.Tool. It is safe for concurrent use.
type Tool struct {
	rt     *runtime.Runtime
	mod    *runtime.Module
	name   string
	man    Manifest
	params json.RawMessage
	out    *registry.Schema // the manifest's output_schema; nil: none
	caps   Capabilities
	unused []Unused
	limits runtime.Limits
	plugin *runtime.Plugin // an Extism plug-in's calls (plugin.go); nil otherwise
	call   *pluginCall     // a tool of an MCP-style plug-in (mcpplugin.go); nil otherwise
}

var _ registry.Presented = (*Tool)(nil)

// Load compiles wasm and reads its manifest from the agrun.manifest custom
// section. It fails if the pin in grant does not match, the manifest is
// missing or invalid, or the sandbox refuses the module.
func Load(ctx context.Context, rt *runtime.Runtime, wasm []byte, grant Grant) (*Tool, error) {
	if err := checkPin(wasm, grant.SHA256); err != nil {
		return nil, err
	}
	secs, err := readSections(wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", runtime.ErrCompile, err)
	}
	sec, err := findManifest(secs)
	if err != nil {
		return nil, err
	}
	if sec == nil {
		return nil, ErrNoManifest
	}
	m, err := ParseManifest(sec)
	if err != nil {
		return nil, err
	}
	return load(ctx, rt, wasm, m, grant)
}

// LoadWithManifest is Load for a module whose manifest comes from elsewhere
// (a bare WASI program written by someone else); a manifest section inside
// the module, if any, is ignored.
func LoadWithManifest(ctx context.Context, rt *runtime.Runtime, wasm []byte, m Manifest, grant Grant) (*Tool, error) {
	if err := checkPin(wasm, grant.SHA256); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	// As ParseManifest returns it: Manifest() then reads the same whichever
	// way the tool was loaded, and the caller's slices are not shared.
	m.Parameters = slices.Clone(m.Parameters)
	m.OutputSchema = slices.Clone(m.OutputSchema)
	m.Permissions = slices.Clone(m.Permissions)
	return load(ctx, rt, wasm, m.normalized(), grant)
}

func checkPin(wasm []byte, pin string) error {
	if pin == "" {
		return nil
	}
	sum := sha256.Sum256(wasm)
	if got := hex.EncodeToString(sum[:]); got != strings.ToLower(pin) {
		return fmt.Errorf("%w: sha256 is %s, the pin says %s", ErrIntegrity, got, pin)
	}
	return nil
}

func load(ctx context.Context, rt *runtime.Runtime, wasm []byte, m Manifest, g Grant) (*Tool, error) {
	g, err := checkGrant(g)
	if err != nil {
		return nil, err
	}
	mod, err := rt.Compile(ctx, wasm)
	if err != nil {
		// Compile errors may quote the module (names, section contents).
		return nil, textsafe.WrapError(err, maxErrorMessage)
	}
	// A memory limit below the module's initial memory would fail every
	// call: refused here, where the operator sees it.
	if limit, min := rt.Effective(g.Limits).MemoryBytes, mod.InitialMemory(); min > limit {
		mod.Close(context.Background())
		return nil, fmt.Errorf("%w: the memory limit %s is below the module's initial memory of %s: every call would fail; grant at least %s",
			ErrInvalidGrant, runtime.FormatBytes(limit), runtime.FormatBytes(min), runtime.FormatBytes(min))
	}
	params := m.Parameters
	if len(bytes.TrimSpace(params)) == 0 {
		params = defaultParameters
	}
	var out *registry.Schema
	if len(m.OutputSchema) > 0 {
		if out, err = registry.CompileSchema(m.OutputSchema); err != nil { // checked by Validate: not reached
			mod.Close(context.Background())
			return nil, &ManifestError{Field: "output_schema", Err: err}
		}
	}
	return &Tool{rt: rt, mod: mod, name: m.Name, man: m, params: params, out: out, caps: capabilities(m.Permissions, g), unused: unused(m.Permissions, g), limits: g.Limits}, nil
}

// checkGrant refuses a grant that would fail every call (or never match)
// at load time, where the operator sees it, and returns it with the guest
// paths cleaned ("/docs/" is "/docs").
func checkGrant(g Grant) (Grant, error) {
	for _, h := range g.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/@?# \t\n") {
			return g, fmt.Errorf("%w: allowed host %q: want a host name or host:port, without scheme or path", ErrInvalidGrant, h)
		}
	}
	mounts := make([]Mount, len(g.Mounts))
	seen := map[string]bool{}
	for i, m := range g.Mounts {
		if !path.IsAbs(m.Guest) {
			return g, fmt.Errorf("%w: mount %q: the guest path must be absolute", ErrInvalidGrant, m.Guest)
		}
		m.Guest = path.Clean(m.Guest)
		if seen[m.Guest] {
			return g, fmt.Errorf("%w: mount %q: guest path mounted twice", ErrInvalidGrant, m.Guest)
		}
		seen[m.Guest] = true
		st, err := os.Stat(m.Host)
		if err != nil {
			return g, fmt.Errorf("%w: mount %q: %w", ErrInvalidGrant, m.Guest, err)
		}
		if !st.IsDir() {
			return g, fmt.Errorf("%w: mount %q: %s is not a directory", ErrInvalidGrant, m.Guest, m.Host)
		}
		mounts[i] = m
	}
	g.Mounts = mounts
	return g, nil
}

// capabilities intersects what the manifest declares with what is granted.
func capabilities(declared []permission.Permission, g Grant) Capabilities {
	has := func(p permission.Permission) bool { return slices.Contains(declared, p) }
	var c Capabilities
	if has(permission.Network) && len(g.AllowedHosts) > 0 {
		c.Network = g.network()
	}
	if has(permission.Filesystem) {
		for _, m := range g.Mounts {
			w := m.Writable && has(permission.Write)
			c.Mounts = append(c.Mounts, Mount{
				Host:        m.Host,
				Guest:       m.Guest,
				Writable:    w,
				AllowDelete: w && m.AllowDelete && has(permission.Delete),
			})
		}
	}
	return c
}

// Unused is a part of a grant the tool cannot use, because it does not
// declare the permission that would link it: the other side of
// Capabilities (declared ∩ granted), computed beside it once, so that a
// front end can say which setting has no effect.
type Unused struct {
	// What is "allowed_hosts", "allow_private" or "mounts" (the whole
	// part has no effect), or "write" or "delete" (the mount Grant.Mounts
	// [Mount] is read-only, or not deleting, for this tool).
	What string
	// Mount indexes Grant.Mounts for "write" and "delete".
	Mount int
	// Needs is the permission the tool would have to declare.
	Needs permission.Permission
}

// unused lists the parts of g that declared does not let the tool use.
func unused(declared []permission.Permission, g Grant) []Unused {
	has := func(p permission.Permission) bool { return slices.Contains(declared, p) }
	var u []Unused
	if len(g.AllowedHosts) > 0 && !has(permission.Network) {
		u = append(u, Unused{What: "allowed_hosts", Needs: permission.Network})
	}
	if len(g.Mounts) > 0 && !has(permission.Filesystem) {
		u = append(u, Unused{What: "mounts", Needs: permission.Filesystem})
	} else {
		for i, m := range g.Mounts {
			switch {
			case m.Writable && !has(permission.Write):
				u = append(u, Unused{What: "write", Mount: i, Needs: permission.Write})
			case m.AllowDelete && !has(permission.Delete):
				u = append(u, Unused{What: "delete", Mount: i, Needs: permission.Delete})
			}
		}
	}
	if g.AllowPrivate && !has(permission.Network) {
		u = append(u, Unused{What: "allow_private", Needs: permission.Network})
	}
	return u
}

// Unused returns the parts of the grant the tool was loaded with that it
// cannot use (see Unused).
func (t *Tool) Unused() []Unused { return slices.Clone(t.unused) }

// Renamed returns a copy of t registered under another name (the config key
// of a tool may rename a third-party tool). The module is shared.
func (t *Tool) Renamed(name string) *Tool {
	c := *t
	c.name = name
	return &c
}

// Name implements registry.Tool.
func (t *Tool) Name() string { return t.name }

// Description implements registry.Tool.
func (t *Tool) Description() string { return t.man.Description }

// Parameters implements registry.Tool.
func (t *Tool) Parameters() json.RawMessage { return t.params }

// Title implements registry.Presented: a manifest has no title, so "".
func (t *Tool) Title() string { return "" }

// OutputSchema implements registry.Presented: the manifest's
// output_schema (nil if none). Every result of the tool matches it.
func (t *Tool) OutputSchema() json.RawMessage { return slices.Clone(t.man.OutputSchema) }

// Permissions implements registry.Tool: what the manifest declares.
func (t *Tool) Permissions() []permission.Permission { return slices.Clone(t.man.Permissions) }

// Manifest returns the tool's manifest, normalized as ParseManifest
// returns it (Output and Parameters filled in). It is a copy: changing it
// does not change the tool.
func (t *Tool) Manifest() Manifest {
	m := t.man
	m.Parameters = slices.Clone(m.Parameters)
	m.OutputSchema = slices.Clone(m.OutputSchema)
	m.Permissions = slices.Clone(m.Permissions)
	return m
}

// Capabilities returns what the tool actually gets (declared ∩ granted).
func (t *Tool) Capabilities() Capabilities { return t.caps }

// SHA256 returns the lowercase hex SHA-256 of the module.
func (t *Tool) SHA256() string { return t.mod.SHA256() }

// Close releases the compiled module. Calls in flight finish first. The
// tools of one MCP-style plug-in share their module: it is released when
// the last of them is closed.
func (t *Tool) Close(ctx context.Context) error {
	if t.call != nil && !t.call.close() {
		return nil
	}
	return t.mod.Close(ctx)
}

// maxErrorMessage caps the error message taken from a guest.
const maxErrorMessage = 4 << 10

// Execute implements registry.Tool: args go to the guest's stdin, its
// stdout is the result (with output "json", invalid UTF-8 inside its
// strings is replaced by U+FFFD; with output "text", it is returned as a
// JSON string without control characters but newline and tab). Errors are
// *registry.Error wrapping the runtime's error: timeout, memory_limit,
// output_limit, permission_denied (the guest called a capability it was
// not granted), cancelled, invalid_arguments (args over the stdin limit),
// other (the tool or runtime was closed), or execution_failed (non-zero
// exit, with the guest's {"error":...} message or the end of its stderr;
// a trap; a result that is empty or not JSON).
func (t *Tool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	res, _, err := t.ExecuteAudited(ctx, args)
	return res, err
}

// ExecuteAudited implements registry.AuditedTool: Execute, and what the
// guest did (see audit.go), also when the call failed.
func (t *Tool) ExecuteAudited(ctx context.Context, args json.RawMessage) (json.RawMessage, *registry.Audit, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	stdin := []byte(args)
	if t.call != nil {
		var err error
		if stdin, err = t.call.input(args); err != nil {
			return nil, nil, registry.Errorf(registry.InvalidArguments, t.name, "arguments: %s", textsafe.Clean(err.Error(), 200))
		}
	}
	out, err := t.rt.Run(ctx, t.mod, runtime.Input{
		Stdin:   stdin,
		Args:    []string{t.name},
		Mounts:  t.caps.Mounts,
		Network: t.caps.Network,
		Limits:  t.limits,
		Name:    t.name,
		Plugin:  t.plugin,
	})
	var audit *registry.Audit
	if out != nil {
		audit = auditOf(out, t.caps.Mounts)
	}
	res, err := t.result(ctx, out, err)
	if err == nil && t.call != nil {
		res, err = t.call.result(t.name, res)
	}
	return res, audit, err
}

// result turns a run's outcome into Execute's.
func (t *Tool) result(ctx context.Context, out *runtime.Output, err error) (json.RawMessage, error) {
	if err != nil {
		if out != nil && len(bytes.TrimSpace(out.Stderr)) > 0 && errors.Is(err, runtime.ErrTrap) {
			// A Go reactor's unrecovered panic traps (it cannot exit 2
			// from inside agrun_call): what it printed says why.
			// Each half of the message is capped so the end of stderr survives.
			err = fmt.Errorf("%w; stderr: %s", textsafe.WrapError(err, maxErrorMessage/2), textsafe.CleanTail(bytes.TrimSpace(out.Stderr), maxErrorMessage/2-16))
		}
		return nil, t.classify(ctx, err)
	}
	data, where := out.Stdout, "stdout"
	if p := out.Plugin; p != nil {
		switch {
		case len(bytes.TrimSpace(p.Error)) > 0:
			return nil, registry.Errorf(registry.ExecutionFailed, t.name, "%s", textsafe.CleanBytes(bytes.TrimSpace(p.Error), maxErrorMessage))
		case p.Status != 0:
			return nil, registry.Errorf(registry.ExecutionFailed, t.name, "the plug-in's function %s returned %d", textsafe.Clean(t.plugin.Function, 80), p.Status)
		case out.ExitCode != 0:
			return nil, registry.Errorf(registry.ExecutionFailed, t.name, "the plug-in exited with code %d", out.ExitCode)
		}
		data, where = p.Output, "its output (output_set)"
	}
	if out.ExitCode != 0 {
		return nil, registry.Errorf(registry.ExecutionFailed, t.name, "%s", guestMessage(out))
	}
	if t.man.Output == OutputText {
		b, _ := json.Marshal(textsafe.CleanBytes(data, 0))
		return b, nil
	}
	res := bytes.TrimSpace(data)
	if len(res) == 0 {
		return nil, registry.Errorf(registry.ExecutionFailed, t.name, "the tool wrote no result to %s", where)
	}
	if !json.Valid(res) {
		return nil, registry.Errorf(registry.ExecutionFailed, t.name, "the tool's output is not valid JSON: %q", textsafe.CleanBytes(res, 200))
	}
	if !utf8.Valid(res) {
		// json.Valid does not check UTF-8, and json.RawMessage is passed on
		// as is. Outside strings a valid document is ASCII, so the invalid
		// bytes sit inside strings: replacing them keeps it valid.
		res = bytes.ToValidUTF8(res, []byte("\uFFFD"))
	}
	if t.out != nil {
		// The manifest promises the result's shape: a result that breaks
		// the promise is the tool's failure, not a result (the schema's
		// validation is bounded by registry.MaxValidationSteps).
		if err := t.out.ValidateJSON(ctx, res); err != nil {
			return nil, registry.Errorf(registry.ExecutionFailed, t.name, "the tool's output does not match its output_schema: %s", textsafe.Clean(err.Error(), 300))
		}
	}
	return json.RawMessage(res), nil
}

func (t *Tool) classify(ctx context.Context, err error) error {
	k := registry.ExecutionFailed
	switch {
	case errors.Is(err, runtime.ErrNotGranted):
		k = registry.PermissionDenied
		err = fmt.Errorf("the tool used a capability it was not granted: %w", err)
	case errors.Is(err, runtime.ErrTimeout) && ctx.Err() == nil:
		k = registry.Timeout
	case ctx.Err() != nil:
		k = registry.KindOf(ctx.Err())
	case errors.Is(err, runtime.ErrTimeout):
		k = registry.Timeout
	case errors.Is(err, runtime.ErrMemoryLimit):
		k = registry.MemoryLimit
	case errors.Is(err, runtime.ErrOutputLimit):
		k = registry.OutputLimit
	case errors.Is(err, runtime.ErrInputLimit):
		k = registry.InvalidArguments
	case errors.Is(err, runtime.ErrClosed):
		k = registry.Other
	}
	// The runtime's text (a trap's names its module's functions; a
	// compile error may quote the module) is cleaned and capped like the
	// guest's own message.
	return registry.NewError(k, t.name, textsafe.WrapError(err, maxErrorMessage))
}

// guestMessage is the message of a failed call: the "error" string of a
// JSON object on stdout, else the tail of stderr, else the exit code.
func guestMessage(out *runtime.Output) string {
	var e struct {
		Error *string `json:"error"`
	}
	if json.Unmarshal(bytes.TrimSpace(out.Stdout), &e) == nil && e.Error != nil && *e.Error != "" {
		return textsafe.Clean(*e.Error, maxErrorMessage)
	}
	if s := bytes.TrimSpace(out.Stderr); len(s) > 0 {
		return textsafe.CleanTail(s, maxErrorMessage)
	}
	return fmt.Sprintf("the tool exited with code %d", out.ExitCode)
}
