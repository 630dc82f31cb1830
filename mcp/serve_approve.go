package mcp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agcore/agrun/registry"
)

// ApprovalCall is one tools/call of a client of the server, as
// ServerOptions.Approve is asked about it.
type ApprovalCall struct {
	Tool      string          // the registry name
	Grant     registry.Grant  // what the tool may do (registry.DescribeGrant)
	Arguments json.RawMessage // as the client sent them
}

// Approval is ServerOptions.Approve's answer about one call. The zero
// value runs the call unasked.
type Approval struct {
	// Refuse, if not empty, refuses the call unasked; it is the reason
	// the client is given.
	Refuse string
	// Ask: the call runs only once the client's user says yes, asked
	// through elicitation (see ServerOptions.Approve).
	Ask bool
	// Question is what the user is asked (cleaned and cut to
	// MaxDescriptionBytes); empty means "agrun: TOOL wants to run with
	// ARGUMENTS".
	Question string
}

// DefaultApprovalTimeout is how long a call waits for the client's user
// to answer an approval question when ServerOptions.ApprovalTimeout is
// zero; no answer in time denies the call.
const DefaultApprovalTimeout = 10 * time.Minute

// approvalKey names the approval question among a result's inputRequests.
const approvalKey = "agrun_approval"

// maxApprovalReason bounds the reason a user gives when saying no.
const maxApprovalReason = 500

// approvalSchema is the form the user answers: a yes/no and, for a no,
// a reason.
var approvalSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"approve": map[string]any{"type": "boolean", "title": "Run this call?", "description": "yes runs the call once; no refuses it", "default": false},
		"reason":  map[string]any{"type": "string", "title": "Why not (optional)", "maxLength": maxApprovalReason},
	},
	"required": []any{"approve"},
}

// approver asks a client's user about the calls ServerOptions.Approve
// says need a yes.
type approver struct {
	decide  func(ApprovalCall) Approval
	timeout time.Duration
	key     []byte // signs the request state of multi-round-trip questions
}

func newApprover(o *ServerOptions) *approver {
	if o.Approve == nil {
		return nil
	}
	a := &approver{decide: o.Approve, timeout: o.ApprovalTimeout, key: make([]byte, 32)}
	if a.timeout <= 0 {
		a.timeout = DefaultApprovalTimeout
	}
	rand.Read(a.key)
	return a
}

// check returns nil when the call may run, else the result that refuses
// it: refused by the policy, declined by the user, no answer in time, or
// no way to ask (a client without elicitation); or, on protocol versions
// from 2026-07-28 (multi round-trip requests, SEP-2322), the
// input-required result that asks the question, the client's retry
// carrying the answer.
func (a *approver) check(ctx context.Context, req *sdk.CallToolRequest, t registry.Tool) *sdk.CallToolResult {
	call := ApprovalCall{Tool: req.Params.Name, Grant: registry.DescribeGrant(t), Arguments: req.Params.Arguments}
	ap := a.decide(call)
	switch {
	case ap.Refuse != "":
		return denied(ap.Refuse)
	case !ap.Ask:
		return nil
	}
	args := call.Arguments
	state := a.state(call.Tool, args)
	// A retry carrying the answer (multi round-trip): it must answer the
	// question asked about this very call, and not long ago.
	if resp, ok := req.Params.InputResponses[approvalKey]; ok {
		if !a.validState(req.Params.RequestState, call.Tool, args) {
			return denied("the approval answer does not belong to this call (or came too late): call again to be asked")
		}
		r, _ := resp.(*sdk.ElicitResult)
		return answered(r)
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil || (caps.Elicitation.Form == nil && caps.Elicitation.URL != nil) {
		return denied("this call needs the approval of the client's user ([approvals] in agrun's configuration), and this client cannot be asked: it offers no form elicitation")
	}
	q := ap.Question
	if q == "" {
		q = fmt.Sprintf("agrun: %s wants to run with %s", call.Tool, summarizeArgs(args))
	}
	params := &sdk.ElicitParams{Mode: "form", Message: SanitizeText(q, MaxDescriptionBytes), RequestedSchema: approvalSchema}
	if supportsMultiRoundTrip(req) {
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{approvalKey: params}, RequestState: state}
	}
	ectx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	r, err := req.Session.Elicit(ectx, params)
	if err != nil {
		if errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return denied(fmt.Sprintf("no decision: the client's user did not answer within %s", a.timeout))
		}
		return denied("no decision: the approval question failed: " + SanitizeText(err.Error(), 200))
	}
	return answered(r)
}

// answered is the outcome of the user's answer r: nil (run) for an
// accepted yes, else the refusal.
func answered(r *sdk.ElicitResult) *sdk.CallToolResult {
	if r == nil {
		return denied("the approval answer is not an elicitation result")
	}
	switch r.Action {
	case "accept":
		if yes, _ := r.Content["approve"].(bool); yes {
			return nil
		}
		reason, _ := r.Content["reason"].(string)
		if reason = strings.TrimSpace(SanitizeText(reason, maxApprovalReason)); reason != "" {
			return denied("the client's user said no: " + reason)
		}
		return denied("the client's user said no")
	case "decline":
		return denied("the client's user declined")
	default:
		return denied("the client's user dismissed the question")
	}
}

func denied(reason string) *sdk.CallToolResult {
	return &sdk.CallToolResult{
		IsError: true,
		Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("error (%s): %s", registry.DeniedByUser, SanitizeText(reason, MaxErrorTextBytes))}},
	}
}

// supportsMultiRoundTrip reports whether the session speaks a protocol
// version with multi round-trip requests (2026-07-28 on): the version the
// SDK negotiated for what the client asked (a version it does not speak
// gets its latest), not the client's word. Then a question is an
// input-required result, and sending elicitation/create is not allowed.
func supportsMultiRoundTrip(req *sdk.CallToolRequest) bool {
	if p := req.Session.InitializeParams(); p != nil {
		return negotiated(p.ProtocolVersion) >= "2026-07-28"
	}
	return true
}

// approvalStateTTL is how long a question's request state stays valid.
const approvalStateTTL = 15 * time.Minute

// state is the request state of a question about tool with args: an
// expiry and a MAC over it, the tool and the arguments, so that an answer
// holds for the call it was asked about only, and not forever.
func (a *approver) state(tool string, args json.RawMessage) string {
	var exp [8]byte
	binary.BigEndian.PutUint64(exp[:], uint64(time.Now().Add(approvalStateTTL).Unix()))
	return base64.RawURLEncoding.EncodeToString(exp[:]) + "." + base64.RawURLEncoding.EncodeToString(a.mac(exp[:], tool, args))
}

func (a *approver) validState(s, tool string, args json.RawMessage) bool {
	e, m, ok := strings.Cut(s, ".")
	if !ok {
		return false
	}
	exp, err1 := base64.RawURLEncoding.DecodeString(e)
	mac, err2 := base64.RawURLEncoding.DecodeString(m)
	if err1 != nil || err2 != nil || len(exp) != 8 || !hmac.Equal(mac, a.mac(exp, tool, args)) {
		return false
	}
	return time.Now().Unix() <= int64(binary.BigEndian.Uint64(exp))
}

func (a *approver) mac(exp []byte, tool string, args json.RawMessage) []byte {
	h := hmac.New(sha256.New, a.key)
	h.Write(exp)
	sum := sha256.Sum256(canonicalJSON(args))
	h.Write(sum[:])
	h.Write([]byte(tool))
	return h.Sum(nil)
}

// canonicalJSON is args re-encoded (object keys sorted, no spaces), so
// that a client which re-encodes the arguments of its retry still
// matches; args that are not JSON are used as they are.
func canonicalJSON(args json.RawMessage) []byte {
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return args
	}
	b, err := json.Marshal(v)
	if err != nil {
		return args
	}
	return b
}

// summarizeArgs is a call's arguments as a question shows them: compact
// JSON, cut.
func summarizeArgs(args json.RawMessage) string {
	s := strings.TrimSpace(string(args))
	if s == "" || s == "null" {
		return "no arguments"
	}
	return SanitizeText(s, 1<<10)
}
