package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"net/url"
	"sort"
	"strings"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero/api"
)

// Extism plug-ins.
//
// A module that imports "extism:host/env" is an Extism plug-in: it reads
// its input, writes its output and reaches config, vars, HTTP and the log
// through Extism's host functions, which address a memory of the host's
// (Extism's "kernel") rather than the guest's own. agrun implements that
// kernel in Go, per call, over a host-side arena (docs/RATIONALE.md,
// "Extism's kernel in Go", has the measurement against reusing Extism's
// kernel module): every address and length the guest passes is checked
// against the arena's blocks (a load or store must lie inside one block;
// a key, value, message or request must be a live block's start); the
// arena's bytes count in the call's
// memory limit together with the guest's own memory; output_set is capped
// like stdout, vars and config are bounded, and everything is gone when
// the call ends (vars included: they do not outlive a call).
// http_request goes through the call's NetworkGrant and its checks, like
// agrun.http_request.

// ExtismModule is the import module of Extism's host functions.
const ExtismModule = "extism:host/env"

// Bounds of the Extism host functions.
const (
	// MaxPluginConfigBytes bounds Plugin.Config (keys and values).
	MaxPluginConfigBytes = 1 << 20
	// MaxPluginVarBytes bounds a call's vars (keys and values, plus 64
	// bytes per entry), as Extism's default max_var_bytes.
	MaxPluginVarBytes = 1 << 20
	// maxArenaBlocks bounds the blocks of a call's arena (live and free).
	maxArenaBlocks = 1 << 16
	// maxPluginError is how much of an error_set message is kept.
	maxPluginError = 64 << 10
	// arenaBase is the address of the arena's first byte: 0 is Extism's
	// null pointer and is never a block.
	arenaBase = 8
	// varOverhead is what each var costs besides its key and value.
	varOverhead = 64
)

// Plugin makes a call an Extism plug-in call: Input.Stdin is the
// plug-in's input, Function the export called.
type Plugin struct {
	// Function is the export to call: a function taking nothing and
	// returning an i32 (the plug-in's status, 0 for success) or nothing.
	Function string
	// Config is what config_get answers, at most MaxPluginConfigBytes in
	// all; a key it lacks answers 0 (no value).
	Config map[string]string
}

// PluginOutput is what an Extism plug-in call produced besides its WASI
// output.
type PluginOutput struct {
	// Output is what the plug-in passed to output_set last (at most
	// Limits.MaxStdout bytes: more ends the call with ErrOutputLimit).
	Output []byte
	// Error is what it passed to error_set last, raw (the first 64 KiB):
	// text the guest chose, to be cleaned before it is shown.
	Error []byte
	// Status is the function's result (0 when it returns nothing).
	Status uint32
}

// i64 and i32 are WebAssembly's value types, for the signature table below.
const i64, i32 = wasmbin.ValI64, wasmbin.ValI32

// extismSigs are the Extism host functions agrun provides and their
// signatures (those of Extism's go-sdk, host.go).
var extismSigs = map[string]wasmbin.FuncType{
	"alloc":            {Params: []byte{i64}, Results: []byte{i64}},
	"free":             {Params: []byte{i64}},
	"length":           {Params: []byte{i64}, Results: []byte{i64}},
	"length_unsafe":    {Params: []byte{i64}, Results: []byte{i64}},
	"load_u8":          {Params: []byte{i64}, Results: []byte{i32}},
	"load_u64":         {Params: []byte{i64}, Results: []byte{i64}},
	"store_u8":         {Params: []byte{i64, i32}},
	"store_u64":        {Params: []byte{i64, i64}},
	"input_length":     {Results: []byte{i64}},
	"input_offset":     {Results: []byte{i64}},
	"input_load_u8":    {Params: []byte{i64}, Results: []byte{i32}},
	"input_load_u64":   {Params: []byte{i64}, Results: []byte{i64}},
	"output_set":       {Params: []byte{i64, i64}},
	"error_set":        {Params: []byte{i64}},
	"config_get":       {Params: []byte{i64}, Results: []byte{i64}},
	"var_get":          {Params: []byte{i64}, Results: []byte{i64}},
	"var_set":          {Params: []byte{i64, i64}},
	"http_request":     {Params: []byte{i64, i64}, Results: []byte{i64}},
	"http_status_code": {Results: []byte{i32}},
	"http_headers":     {Results: []byte{i64}},
	"log_trace":        {Params: []byte{i64}},
	"log_debug":        {Params: []byte{i64}},
	"log_info":         {Params: []byte{i64}},
	"log_warn":         {Params: []byte{i64}},
	"log_error":        {Params: []byte{i64}},
	"get_log_level":    {Results: []byte{i32}},
}

// isPlugin says whether a module's imports make it an Extism plug-in.
func isPlugin(m *wasmbin.Module) bool {
	for _, im := range m.Imports {
		if im.Module == ExtismModule {
			return true
		}
	}
	return false
}

// IsPlugin reports whether the module is an Extism plug-in (it imports
// ExtismModule). Run it with Input.Plugin set.
func (m *Module) IsPlugin() bool { return isPlugin(m.c.info.Module) }

// PluginFunction checks that the module is an Extism plug-in exporting
// name as a function Run can call: no parameters, an i32 result or none.
// The error wraps ErrCompile.
func (m *Module) PluginFunction(name string) error {
	if !m.IsPlugin() {
		return fmt.Errorf("%w: the module does not import %s: it is not an Extism plug-in", ErrCompile, ExtismModule)
	}
	f, ok := m.c.cm.ExportedFunctions()[name]
	if !ok || strings.HasPrefix(name, snapshotGlobalPrefix) || strings.HasPrefix(name, "agrun.") {
		return fmt.Errorf("%w: the plug-in exports no function %q", ErrCompile, name)
	}
	switch name {
	case "_start", "_initialize":
		return fmt.Errorf("%w: %q is the plug-in's start-up, not a function to call", ErrCompile, name)
	}
	res := f.ResultTypes()
	if len(f.ParamTypes()) != 0 || len(res) > 1 || len(res) == 1 && res[0] != api.ValueTypeI32 {
		return fmt.Errorf("%w: the plug-in's export %q has signature %v -> %v, want () -> i32 or () -> ()", ErrCompile, name, f.ParamTypes(), res)
	}
	return nil
}

// extBlock is one block of the arena: [off, off+size) is its room, len
// the length the guest asked for.
type extBlock struct {
	off, size, len uint64
	free           bool
}

// extState is one plug-in call's kernel: the arena and its blocks, the
// input, output and error, config, vars and the last HTTP response.
// It lives on the guest's goroutine only.
type extState struct {
	arena  []byte     // address a is arena[a-arenaBase]
	blocks []extBlock // by offset
	free   [65][]int  // indices of free blocks by size class (log2 size)
	input  uint64     // the input's block (0 when the input is empty)
	inLen  uint64

	output   []byte
	errMsg   []byte
	status   uint32
	config   map[string]string
	vars     map[string][]byte
	varBytes int64

	httpStatus  int32
	httpHeaders map[string]string
}

func newExtState(input []byte, p *Plugin) *extState {
	e := &extState{config: p.Config, vars: map[string][]byte{}}
	if len(input) > 0 {
		e.input, _ = e.alloc(uint64(len(input)), 0)
		copy(e.bytes(e.input, uint64(len(input))), input)
		e.inLen = uint64(len(input))
	}
	return e
}

// extHeld is what the call's kernel holds (see extState.held), 0 when
// the call is not a plug-in's.
func (st *callState) extHeld() uint64 {
	if st.ext == nil {
		return 0
	}
	return st.ext.held()
}

// held is what the arena and the vars take: the host memory the guest
// holds besides its own, counted in its memory limit.
func (e *extState) held() uint64 { return uint64(cap(e.arena)) + uint64(e.varBytes) }

// sizeClass is the class of a block of n > 0 bytes: its room is 1<<class.
func sizeClass(n uint64) int { return bits.Len64(n - 1) }

// alloc returns a new block of n bytes (zeroed), or 0 for n == 0. It
// fails (false) when the block table is full. The arena grows to at most
// maxCap bytes of capacity when that is enough.
func (e *extState) alloc(n, maxCap uint64) (uint64, bool) {
	if n == 0 {
		return 0, true
	}
	c := sizeClass(max(n, 8))
	if l := e.free[c]; len(l) > 0 {
		i := l[len(l)-1]
		e.free[c] = l[:len(l)-1]
		b := &e.blocks[i]
		b.free, b.len = false, n
		clear(e.bytes(b.off, b.size))
		return b.off, true
	}
	if len(e.blocks) >= maxArenaBlocks {
		return 0, false
	}
	size := uint64(1) << c
	off := arenaBase + uint64(len(e.arena))
	need := uint64(len(e.arena)) + size
	if need > uint64(cap(e.arena)) {
		grown := make([]byte, len(e.arena), max(need, min(2*uint64(cap(e.arena)), maxCap)))
		copy(grown, e.arena)
		e.arena = grown
	}
	e.arena = e.arena[:need]
	e.blocks = append(e.blocks, extBlock{off: off, size: size, len: n})
	return off, true
}

// bytes is the arena at [addr, addr+n); the caller checked the range.
func (e *extState) bytes(addr, n uint64) []byte {
	return e.arena[addr-arenaBase : addr-arenaBase+n]
}

// find returns the index of the block whose room holds [addr, addr+n),
// or -1. A freed block counts: the PDKs read blocks the host freed (the Go
// PDK frees a request after http_request wrote the response, which may
// reuse it), and Extism's kernel lets them; every byte of the arena is
// the call's own.
func (e *extState) find(addr, n uint64) int {
	if addr < arenaBase {
		return -1
	}
	i := sort.Search(len(e.blocks), func(i int) bool { return e.blocks[i].off > addr }) - 1
	if i < 0 {
		return -1
	}
	b := e.blocks[i]
	if addr+n < addr || addr+n > b.off+b.size {
		return -1
	}
	return i
}

// block returns the live block starting at addr, or -1.
func (e *extState) block(addr uint64) int {
	i := e.find(addr, 0)
	if i < 0 || e.blocks[i].off != addr || e.blocks[i].free {
		return -1
	}
	return i
}

// view returns the live block at addr in place (no copy: a guest's block
// may be as large as its memory limit, and a copy of it would be host
// memory charged to nothing), or false. A caller copies only what it keeps,
// after checking its size.
func (e *extState) view(addr uint64) ([]byte, bool) {
	i := e.block(addr)
	if i < 0 {
		return nil, false
	}
	return e.bytes(addr, e.blocks[i].len), true
}

// release frees the live block at addr; anything else is ignored (a
// double free, a pointer that is not a block's), as Extism's kernel does.
func (e *extState) release(addr uint64) {
	i := e.block(addr)
	if i < 0 || addr == e.input {
		return
	}
	b := &e.blocks[i]
	b.free = true
	c := sizeClass(b.size)
	e.free[c] = append(e.free[c], i)
}

// plugin returns the call's kernel; a module run without Input.Plugin has
// none (Run refuses that; this is the belt).
func (st *callState) plugin() *extState {
	if st.ext == nil {
		panic("extism host function called outside a plug-in call")
	}
	return st.ext
}

// failCall ends the call with err (the first such error wins).
func (st *callState) failCall(err error) {
	st.hostErr.CompareAndSwap(nil, &err)
	st.cancel(err)
}

// ErrPluginFault is wrapped (with ErrTrap) by the error of a plug-in call
// that passed Extism's host functions an address or length outside its
// blocks, or a malformed request.
var ErrPluginFault = errors.New("invalid use of an Extism host function")

func (st *callState) fault(fn, format string, args ...any) {
	st.failCall(fmt.Errorf("%w: %w: %s: %s", ErrTrap, ErrPluginFault, fn, fmt.Sprintf(format, args...)))
}

// newBlock allocates n bytes for the guest, counted in its memory limit
// together with its own memory; over it, the call ends with
// ErrMemoryLimit.
func (st *callState) newBlock(mod api.Module, fn string, n uint64) (uint64, bool) {
	e := st.plugin()
	limit := uint64(st.lim.MemoryBytes) &^ 0xffff
	var guest uint64
	if m := mod.Memory(); m != nil {
		guest = uint64(m.Size())
	}
	room := uint64(1) << sizeClass(max(n, 8))
	if n > 0 && n <= limit && len(e.free[sizeClass(max(n, 8))]) > 0 {
		room = 0 // a free block is reused: the arena does not grow
	}
	if n > limit || guest+uint64(len(e.arena))+uint64(e.varBytes)+room > limit {
		st.memoryExceeded()
		return 0, false
	}
	addr, ok := e.alloc(n, limit-guest-uint64(e.varBytes))
	if !ok {
		st.failCall(&limitError{fmt.Sprintf("memory limit: more than %d Extism memory blocks", maxArenaBlocks), ErrMemoryLimit, nil})
		return 0, false
	}
	return addr, true
}

// writeBlock copies b into a new block and returns its address (0 for
// empty b).
func (st *callState) writeBlock(mod api.Module, fn string, b []byte) (uint64, bool) {
	addr, ok := st.newBlock(mod, fn, uint64(len(b)))
	if ok && addr != 0 {
		copy(st.ext.bytes(addr, uint64(len(b))), b)
	}
	return addr, ok
}

// instantiateExtism registers import module "extism:host/env". As with
// "agrun", one module serves every call; each function finds its call's
// kernel in the context.
func (r *Runtime) instantiateExtism(ctx context.Context) error {
	b := r.wz.NewHostModuleBuilder(ExtismModule)
	for name, sig := range extismSigs {
		fn := extismFuncs[name]
		if fn == nil {
			return fmt.Errorf("extism function %s has no implementation", name)
		}
		params := append([]api.ValueType(nil), sig.Params...)
		results := append([]api.ValueType(nil), sig.Results...)
		b.NewFunctionBuilder().
			WithGoModuleFunction(extismHost(name, fn), params, results).
			Export(name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// extismFn is one Extism host function: stack as wazero passes it.
type extismFn func(ctx context.Context, st *callState, mod api.Module, stack []uint64)

// extismHost wraps fn: the deadline check and audit of every host call,
// the snapshot rule (no host call during _initialize), the panic guard,
// and stopping the guest at once when fn ended the call.
func extismHost(name string, fn extismFn) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		st := enter(ctx)
		if st == nil || st.whileSnapshotting(stack) {
			clear(stack)
			return
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					st.failCall(logHostPanic(ctx, st, ExtismModule+"."+name, p))
				}
			}()
			fn(ctx, st, mod, stack)
		}()
		if ctx.Err() != nil {
			stopGuest(ctx)
		}
	}
}

var extismFuncs map[string]extismFn

func init() {
	extismFuncs = map[string]extismFn{
		"alloc": func(_ context.Context, st *callState, mod api.Module, s []uint64) {
			s[0], _ = st.newBlock(mod, "alloc", s[0])
		},
		"free": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			st.plugin().release(s[0])
		},
		"length":        extLength,
		"length_unsafe": extLength,
		"load_u8": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			e := st.plugin()
			if e.find(s[0], 1) < 0 {
				st.fault("load_u8", "address %d is outside every block", s[0])
				return
			}
			s[0] = uint64(e.bytes(s[0], 1)[0])
		},
		"load_u64": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			e := st.plugin()
			if e.find(s[0], 8) < 0 {
				st.fault("load_u64", "8 bytes at address %d are not inside one block", s[0])
				return
			}
			s[0] = binary.LittleEndian.Uint64(e.bytes(s[0], 8))
		},
		"store_u8": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			e := st.plugin()
			if e.find(s[0], 1) < 0 {
				st.fault("store_u8", "address %d is outside every block", s[0])
				return
			}
			e.bytes(s[0], 1)[0] = byte(s[1])
		},
		"store_u64": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			e := st.plugin()
			if e.find(s[0], 8) < 0 {
				st.fault("store_u64", "8 bytes at address %d are not inside one block", s[0])
				return
			}
			binary.LittleEndian.PutUint64(e.bytes(s[0], 8), s[1])
		},
		"input_length": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			s[0] = st.plugin().inLen
		},
		"input_offset": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			s[0] = st.plugin().input
		},
		"input_load_u8": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			e := st.plugin()
			if s[0] >= e.inLen {
				st.fault("input_load_u8", "offset %d is past the input's %d bytes", s[0], e.inLen)
				return
			}
			s[0] = uint64(e.bytes(e.input+s[0], 1)[0])
		},
		"input_load_u64": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			e := st.plugin()
			if e.inLen < 8 || s[0] > e.inLen-8 {
				st.fault("input_load_u64", "8 bytes at offset %d are past the input's %d bytes", s[0], e.inLen)
				return
			}
			s[0] = binary.LittleEndian.Uint64(e.bytes(e.input+s[0], 8))
		},
		"output_set": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			e := st.plugin()
			addr, n := s[0], s[1]
			if uint64(st.lim.MaxStdout) < n {
				st.outputExceeded("output", st.lim.MaxStdout)
				return
			}
			if n > 0 && e.find(addr, n) < 0 {
				st.fault("output_set", "%d bytes at address %d are not inside one block", n, addr)
				return
			}
			e.output = nil
			if n > 0 {
				e.output = append([]byte(nil), e.bytes(addr, n)...)
			}
		},
		"error_set": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			e := st.plugin()
			if s[0] == 0 {
				e.errMsg = nil
				return
			}
			i := e.block(s[0])
			if i < 0 {
				st.fault("error_set", "address %d is not a block", s[0])
				return
			}
			e.errMsg = append([]byte(nil), e.bytes(s[0], min(e.blocks[i].len, maxPluginError))...)
		},
		"config_get": func(_ context.Context, st *callState, mod api.Module, s []uint64) {
			e := st.plugin()
			key, ok := e.view(s[0])
			if !ok {
				st.fault("config_get", "address %d is not a block", s[0])
				return
			}
			v, ok := e.config[string(key)] // the lookup does not copy key
			if !ok {
				s[0] = 0
				return
			}
			s[0], _ = st.writeBlock(mod, "config_get", []byte(v))
		},
		"var_get": func(_ context.Context, st *callState, mod api.Module, s []uint64) {
			e := st.plugin()
			key, ok := e.view(s[0])
			if !ok {
				st.fault("var_get", "address %d is not a block", s[0])
				return
			}
			v, ok := e.vars[string(key)] // the lookup does not copy key
			e.release(s[0])              // as Extism's host does
			if !ok {
				s[0] = 0
				return
			}
			s[0], _ = st.writeBlock(mod, "var_get", v)
		},
		"var_set":      extVarSet,
		"http_request": extHTTPRequest,
		"http_status_code": func(_ context.Context, st *callState, _ api.Module, s []uint64) {
			s[0] = api.EncodeI32(st.plugin().httpStatus)
		},
		"http_headers": func(_ context.Context, st *callState, mod api.Module, s []uint64) {
			e := st.plugin()
			if e.httpHeaders == nil {
				s[0] = 0
				return
			}
			b, _ := json.Marshal(e.httpHeaders)
			s[0], _ = st.writeBlock(mod, "http_headers", b)
		},
		"log_trace":     extLog(slog.LevelDebug - 4),
		"log_debug":     extLog(slog.LevelDebug),
		"log_info":      extLog(slog.LevelInfo),
		"log_warn":      extLog(slog.LevelWarn),
		"log_error":     extLog(slog.LevelError),
		"get_log_level": extLogLevel,
	}
}

func extLength(_ context.Context, st *callState, _ api.Module, s []uint64) {
	e := st.plugin()
	if i := e.block(s[0]); i >= 0 {
		s[0] = e.blocks[i].len
	} else {
		s[0] = 0
	}
}

func extVarSet(_ context.Context, st *callState, _ api.Module, s []uint64) {
	e := st.plugin()
	key, ok := e.view(s[0])
	if !ok {
		st.fault("var_set", "the key's address %d is not a block", s[0])
		return
	}
	old, had := e.vars[string(key)]
	if s[1] == 0 {
		if had {
			e.varBytes -= int64(len(key)+len(old)) + varOverhead
			delete(e.vars, string(key))
		}
		e.release(s[0])
		return
	}
	v, ok := e.view(s[1])
	if !ok {
		st.fault("var_set", "the value's address %d is not a block", s[1])
		return
	}
	// The size is checked on the blocks in place; only what is kept is
	// copied (the key by string(), the value below).
	size := e.varBytes + int64(len(key)+len(v)) + varOverhead
	if had {
		size -= int64(len(key)+len(old)) + varOverhead
	}
	if size > MaxPluginVarBytes {
		st.failCall(&limitError{"memory limit: the plug-in's vars exceeded " + FormatBytes(MaxPluginVarBytes), ErrMemoryLimit, nil})
		return
	}
	e.vars[string(key)], e.varBytes = bytes.Clone(v), size
	e.release(s[0])
	e.release(s[1])
}

// extLog implements log_*(addr): the message block is logged as
// agrun.log's are (same caps) and freed, as Extism's host does.
func extLog(level slog.Level) extismFn {
	return func(ctx context.Context, st *callState, _ api.Module, s []uint64) {
		e := st.plugin()
		i := e.block(s[0])
		if i < 0 {
			st.fault("log", "address %d is not a block", s[0])
			return
		}
		n := e.blocks[i].len
		st.logMessage(ctx, level, e.bytes(s[0], min(n, maxLogMessage)), int64(n))
		e.release(s[0])
	}
}

// extLogLevel implements get_log_level: the least level the Logger takes,
// in Extism's numbers (0 trace … 4 error, MaxInt32 off).
func extLogLevel(ctx context.Context, st *callState, _ api.Module, s []uint64) {
	lvl := int32(math.MaxInt32)
	for i, l := range []slog.Level{slog.LevelDebug - 4, slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if st.r.cfg.Logger.Enabled(ctx, l) {
			lvl = int32(i)
			break
		}
	}
	s[0] = api.EncodeI32(lvl)
}

// extismRequest is the request JSON of Extism's http_request.
type extismRequest struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Method  string            `json:"method"`
}

// extHTTPRequest implements http_request(req, body) -> body: the request
// goes through the call's NetworkGrant exactly as agrun.http_request's
// (allowed hosts matched exactly, never as Extism's globs; the address
// checks; the response cap; the per-call count). A request the grant
// refuses ends the call with ErrNotGranted, one that fails otherwise
// with an error naming why (Extism's host fails the call too).
func extHTTPRequest(ctx context.Context, st *callState, mod api.Module, s []uint64) {
	e := st.plugin()
	e.httpStatus, e.httpHeaders = 0, nil
	raw, ok := e.view(s[0])
	if !ok {
		st.fault("http_request", "the request's address %d is not a block", s[0])
		return
	}
	if len(raw) > maxRequestBytes { // checked in place, before anything is copied
		st.fault("http_request", "request of %d bytes, at most %d", len(raw), maxRequestBytes)
		return
	}
	var in extismRequest
	err := json.Unmarshal(raw, &in)
	e.release(s[0])
	if err != nil {
		st.fault("http_request", "invalid request JSON: %v", err)
		return
	}
	req := httpRequest{Method: strings.ToUpper(in.Method), URL: in.URL}
	if len(in.Headers) > 0 {
		req.Headers = make(map[string][]string, len(in.Headers))
		for k, v := range in.Headers {
			req.Headers[k] = []string{v}
		}
	}
	if s[1] != 0 {
		body, ok := e.view(s[1])
		if !ok {
			st.fault("http_request", "the body's address %d is not a block", s[1])
			return
		}
		if len(body) > maxRequestBytes {
			st.fault("http_request", "request body of %d bytes, at most %d", len(body), maxRequestBytes)
			return
		}
		req.Body = bytes.Clone(body)
		e.release(s[1])
	}
	reqJSON, _ := json.Marshal(req)
	switch resp := st.request(ctx, reqJSON).(type) {
	case httpResponse:
		e.httpStatus = int32(resp.Status)
		e.httpHeaders = make(map[string]string, len(resp.Headers))
		for k, v := range resp.Headers {
			e.httpHeaders[strings.ToLower(k)] = strings.Join(v, ",")
		}
		s[0], _ = st.writeBlock(mod, "http_request", resp.Body)
	case struct {
		Error apiError `json:"error"`
	}:
		if ctx.Err() != nil {
			return // the call's deadline (or its end) came during the request: classify says which
		}
		// Only the host's own text: a method agrun accepts, the URL's host
		// (never its user info), printable and capped.
		method := "?"
		if validMethod(req.Method) {
			method = req.Method
		}
		msg := fmt.Sprintf("%s %s: %s (%s)", method, hostOf(in.URL), printableCut(resp.Error.Message, 512), printableCut(resp.Error.Code, 64))
		switch resp.Error.Code {
		case "not_granted", "forbidden":
			st.failCall(fmt.Errorf("%w: %s.http_request refused: %s", ErrNotGranted, ExtismModule, msg))
		default:
			st.failCall(fmt.Errorf("%w: %s.http_request failed: %s", ErrPluginHTTP, ExtismModule, msg))
		}
	}
}

// ErrPluginHTTP is wrapped by the error of a plug-in call whose
// http_request failed for another reason than the grant (a network
// error, a timeout, a response over the cap): Extism's http_request has
// no way to tell the plug-in, so the call fails, naming why.
var ErrPluginHTTP = errors.New("the plug-in's HTTP request failed")

// hostOf is the host[:port] of URL u for a message: parsed, so that user
// info (credentials) is never shown, printable and capped; "?" if u has
// none.
func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "?"
	}
	return printableCut(p.Host, 256)
}

// printableCut is s with every byte outside printable ASCII as '?', cut
// to at most n bytes: guest-influenced text in a runtime error, which
// reaches an embedder that may not clean it.
func printableCut(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// checkPluginInput refuses a plug-in call Run cannot make.
func checkPluginInput(m *Module, p *Plugin) error {
	switch {
	case p == nil && m.IsPlugin():
		return fmt.Errorf("%w: the module is an Extism plug-in (it imports %s): Run it with Input.Plugin", ErrCompile, ExtismModule)
	case p == nil:
		return nil
	}
	if err := m.PluginFunction(p.Function); err != nil {
		return err
	}
	n := 0
	for k, v := range p.Config {
		n += len(k) + len(v)
	}
	if n > MaxPluginConfigBytes {
		return fmt.Errorf("%w: the plug-in's config is %d bytes, over the limit of %d", ErrInputLimit, n, MaxPluginConfigBytes)
	}
	return nil
}
