package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// Limits of the agrun host functions (guest-sdk/ABI.md, section 4).
const (
	maxLogMessage   = 4 << 10
	maxLogPerCall   = 256 << 10
	maxRequestBytes = 1 << 20
)

// Error codes returned to the guest (ABI section 4.3).
const (
	codeFault       = -1 // a pointer/length pair lies outside memory
	codeNoPending   = -2 // no pending response
	codeTooSmall    = -3 // buffer too small; the response stays pending
	codeRequestSize = -4 // request larger than 1 MiB
)

// instantiateHost registers import module "agrun". One module serves every
// call: each function finds its call's state in the context wazero passes
// it, so a call without a NetworkGrant gets the not_granted behaviour from
// the same http_request.
func (r *Runtime) instantiateHost(ctx context.Context) error {
	i32 := api.ValueTypeI32
	b := r.wz.NewHostModuleBuilder("agrun")
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostLog), []api.ValueType{i32, i32, i32}, nil).
		WithParameterNames("level", "msg_ptr", "msg_len").
		Export("log")
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostHTTPRequest), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		WithParameterNames("req_ptr", "req_len").
		Export("http_request")
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostHTTPResponse), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		WithParameterNames("buf_ptr", "buf_len").
		Export("http_response")
	_, err := b.Instantiate(ctx)
	return err
}

// guard recovers a panic in a host function: the call ends with an error
// naming the function instead of taking the host down (ErrTrap, "the host
// refused a call to agrun.<name>"; the panic and its stack are logged,
// never returned: see wasi.go). stack[0], if the function has a result,
// is set to EFAULT.
func guard(ctx context.Context, st *callState, name string, stack []uint64) {
	if p := recover(); p != nil {
		err := logHostPanic(ctx, st, "agrun."+name, p)
		if st != nil {
			st.hostErr.CompareAndSwap(nil, &err)
			st.cancel(err)
		}
		if len(stack) > 0 {
			stack[0] = api.EncodeI32(codeFault)
		}
	}
}

// enter starts an agrun host function: it stops the guest if the call has
// ended (so that a loop of host calls ends at the deadline: the guest's
// meter counts only its own instructions), and returns the call's state.
func enter(ctx context.Context) *callState {
	if ctx.Err() != nil {
		stopGuest(ctx)
	}
	st := stateOf(ctx)
	if st != nil {
		st.audit.hostCalled()
	}
	return st
}

func stateOf(ctx context.Context) *callState {
	st, _ := ctx.Value(callStateKey{}).(*callState)
	return st
}

// hostLog implements agrun.log(level, msg_ptr, msg_len).
func hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	st := enter(ctx)
	defer guard(ctx, st, "log", nil)
	if st == nil || ctx.Err() != nil || st.whileSnapshotting(nil) {
		return
	}
	level, ptr, n := int32(api.DecodeI32(stack[0])), api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
	if uint64(ptr)+uint64(n) > uint64(mod.Memory().Size()) {
		return
	}
	msg, ok := mod.Memory().Read(ptr, min(n, maxLogMessage))
	if !ok {
		return
	}
	var lvl slog.Level
	switch {
	case level <= 0:
		lvl = slog.LevelDebug
	case level == 1:
		lvl = slog.LevelInfo
	case level == 2:
		lvl = slog.LevelWarn
	default:
		lvl = slog.LevelError
	}
	st.logMessage(ctx, lvl, msg, int64(n))
}

// logMessage logs what a guest wrote to the log (msg, of a message of n
// bytes), within the per-message and per-call caps.
func (st *callState) logMessage(ctx context.Context, lvl slog.Level, msg []byte, n int64) {
	if st.logged >= maxLogPerCall {
		return
	}
	take := min(int64(len(msg)), maxLogMessage, maxLogPerCall-st.logged)
	st.logged += take
	text := strings.ToValidUTF8(string(msg[:take]), "\uFFFD")
	attrs := st.logAttrs()
	if take < n {
		attrs = append(attrs, slog.Bool("truncated", true))
	}
	st.r.cfg.Logger.LogAttrs(ctx, lvl, text, attrs...)
}

// hostHTTPRequest implements agrun.http_request(req_ptr, req_len) -> i32.
func hostHTTPRequest(ctx context.Context, mod api.Module, stack []uint64) {
	st := enter(ctx)
	defer guard(ctx, st, "http_request", stack)
	if st.whileSnapshotting(stack) {
		return
	}
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	stack[0] = api.EncodeI32(st.httpRequest(ctx, mod, ptr, n))
}

func (st *callState) httpRequest(ctx context.Context, mod api.Module, ptr, n uint32) int32 {
	if n > maxRequestBytes {
		return codeRequestSize
	}
	req, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return codeFault
	}
	if st.grant == nil {
		st.notGranted.Store(true)
	}
	resp := st.request(ctx, req)
	b, err := json.Marshal(resp)
	if err != nil { // cannot happen: the values are plain
		b = []byte(`{"error":{"code":"network","message":"encoding the response failed"}}`)
	}
	st.pending, st.hasResp = b, true
	return int32(len(b))
}

// request performs the request req (agrun.http_request's JSON) under the
// call's grant and returns the response document: an httpResponse, or an
// error object (not_granted, too_many_requests, and those of netClient).
// Every request is audited.
func (st *callState) request(ctx context.Context, req []byte) any {
	var resp any
	switch {
	case st.grant == nil:
		resp = errorResponse("not_granted", "network access was not granted to this call")
		st.audit.request(refusedRequest(req, "not_granted"))
	case st.reqs >= st.maxRequests():
		resp = errorResponse("too_many_requests", fmt.Sprintf("at most %d requests per call", st.maxRequests()))
		st.audit.request(refusedRequest(req, "too_many_requests"))
	default:
		st.reqs++
		if st.net == nil {
			st.net = newNetClient(st.grant)
		}
		var ra RequestAudit
		resp, ra = st.net.do(ctx, req)
		st.audit.request(ra)
	}
	return resp
}

func (st *callState) maxRequests() int {
	if st.grant.MaxRequests > 0 {
		return st.grant.MaxRequests
	}
	return defaultMaxRequests
}

// hostHTTPResponse implements agrun.http_response(buf_ptr, buf_len) -> i32.
func hostHTTPResponse(ctx context.Context, mod api.Module, stack []uint64) {
	st := enter(ctx)
	defer guard(ctx, st, "http_response", stack)
	if st.whileSnapshotting(stack) {
		return
	}
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	stack[0] = api.EncodeI32(st.httpResponse(mod, ptr, n))
}

func (st *callState) httpResponse(mod api.Module, ptr, n uint32) int32 {
	if uint64(ptr)+uint64(n) > uint64(mod.Memory().Size()) {
		return codeFault
	}
	if !st.hasResp {
		return codeNoPending
	}
	if uint64(n) < uint64(len(st.pending)) {
		return codeTooSmall
	}
	if !mod.Memory().Write(ptr, st.pending) {
		return codeFault
	}
	written := int32(len(st.pending))
	st.pending, st.hasResp = nil, false
	return written
}

// apiError is the body of an error response.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func errorResponse(code, msg string) any {
	return struct {
		Error apiError `json:"error"`
	}{apiError{code, msg}}
}

// refusedRequest is the audit of a request refused before it was parsed
// for sending: its method and host, as far as they can be read.
func refusedRequest(req []byte, code string) RequestAudit {
	var in struct {
		Method string `json:"method"`
		URL    string `json:"url"`
	}
	ra := RequestAudit{Error: code}
	if json.Unmarshal(req, &in) == nil {
		ra.Method = in.Method
		if ra.Method == "" {
			ra.Method = "GET"
		}
		if u, err := url.Parse(in.URL); err == nil {
			ra.Host = u.Host
		}
	}
	return ra
}
