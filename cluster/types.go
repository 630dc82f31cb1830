package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/store"
	"strings"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
)

// Names of the workflow and activities as registered with Temporal.
// They are part of the wire contract between clients and workers of
// different versions: never renamed.
const (
	WorkflowName  = "agrun.session"
	ModelActivity = "agrun.model"
	ToolActivity  = "agrun.tool"
	// SeqActivity reads a session's next record (Activities.Seq): a
	// local activity of the workflow worker, the first thing a run does.
	SeqActivity = "agrun.seq"
	// LocalToolActivity runs a tool call as a local activity of the
	// workflow worker, if that worker serves the call's queue (else it
	// answers so, and the call goes to the queue as a ToolActivity).
	LocalToolActivity = "agrun.tool.local"
)

// MemoSeq is the workflow memo field holding the seq a run's records
// begin at (set before any of them is stored; Client.Follow reads it).
const MemoSeq = "agrun_seq"

// DefaultQueuePrefix is the default [cluster] task_queue_prefix.
const DefaultQueuePrefix = "agrun-"

// DefaultInlineLimit is how large a payload (a tool result, a call's
// arguments, a final answer) may be inside workflow history; a larger one
// is put in the blob store and passed by reference. Temporal refuses
// payloads over 2 MB and warns over 256 KiB, and one step carries a whole
// batch: up to loop.DefaultMaxToolCallsPerTurn (32) results or calls of
// at most 16 KiB each (about 22 KiB as base64 in JSON; a result's whole
// JSON, audit included, is bounded so: ToolResult.Whole) stay under
// 1 MiB.
const DefaultInlineLimit = 16 << 10

// DefaultContinueAfterEvents is the workflow history length after which a
// run continues as new (Temporal's hard limit is 51,200 events).
const DefaultContinueAfterEvents = 10_000

// Queues are the task queues of a cluster: Sessions for the session
// workflows' tasks (served by every worker), LLM for model requests, WASM
// for WebAssembly tool calls, MCP for MCP tool calls.
type Queues struct {
	Sessions string `json:"sessions"`
	LLM      string `json:"llm"`
	WASM     string `json:"wasm"`
	MCP      string `json:"mcp"`
}

// QueuesFor returns the queues named with prefix (empty:
// DefaultQueuePrefix): "agrun-sessions", "agrun-llm", "agrun-wasm",
// "agrun-mcp".
func QueuesFor(prefix string) Queues {
	if prefix == "" {
		prefix = DefaultQueuePrefix
	}
	return Queues{Sessions: prefix + "sessions", LLM: prefix + "llm", WASM: prefix + "wasm", MCP: prefix + "mcp"}
}

// forSource is the queue of a tool call, by its grant's source: "wasm"
// and "mcp" calls have their own queues; a tool of another kind runs on
// the LLM queue (every worker has the whole registry).
func (q Queues) forSource(source string) string {
	switch source {
	case "wasm":
		return q.WASM
	case "mcp":
		return q.MCP
	}
	return q.LLM
}

// serveOf is the WorkerOptions.Serve name of a call's queue, by its
// grant's source (as forSource).
func serveOf(source string) string {
	switch source {
	case "wasm":
		return ServeWASM
	case "mcp":
		return ServeMCP
	}
	return ServeLLM
}

// WorkflowID is the Temporal workflow id of a session: one run of a
// session at a time, cluster-wide (a second start while one runs is
// refused), as the local path's session lock does on one machine.
func WorkflowID(session string) string { return "agrun-session-" + session }

// Payload is bytes carried by a workflow step: inline when small, else a
// reference to the blob store (Ref: "blobs/sha256/<digest>").
type Payload struct {
	Data []byte `json:"data,omitempty"`
	Ref  string `json:"ref,omitempty"`
	Size int    `json:"size,omitempty"`
}

// RunInput starts a run of a session: one prompt answered, with as many
// model requests and tool calls as that takes. Seq is where the run's
// records begin: a new run reads it from the session store once it has
// started (SeqActivity; what its starter put here is ignored), a run that
// continues as new carries it with its state in the other fields.
type RunInput struct {
	Session string `json:"session"`
	Prompt  string `json:"prompt,omitempty"`
	// PromptRef holds a prompt over the inline limit (Prompt is then "").
	PromptRef *Payload `json:"prompt_ref,omitempty"`
	Seq       int64    `json:"seq"`
	Queues    Queues   `json:"queues"`
	// MaxTurns bounds the model requests of the run (0: 16).
	MaxTurns int `json:"max_turns,omitempty"`
	// RetrySideEffects: a tool call with side effects (see SideEffects)
	// whose worker was lost is run again; false (the default), the model
	// is told the worker was lost.
	RetrySideEffects bool `json:"retry_side_effects,omitempty"`
	// HeartbeatTimeout: a worker silent this long is lost (0: 20 s).
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// ModelTimeout bounds one attempt of a model step, the loop's own
	// retries included (0: 15 min); a step has up to 3 attempts.
	ModelTimeout time.Duration `json:"model_timeout,omitempty"`
	// ToolAttempts is how often a call without side effects is tried
	// (0: 3), each attempt on any worker of its queue.
	ToolAttempts int `json:"tool_attempts,omitempty"`
	// ContinueAfterEvents (0: DefaultContinueAfterEvents).
	ContinueAfterEvents int `json:"continue_after_events,omitempty"`
	// ApprovalTimeout is how long a call that needs a person's yes waits
	// for the decision (DecideUpdate) before it is denied (0:
	// DefaultApprovalTimeout).
	ApprovalTimeout time.Duration `json:"approval_timeout,omitempty"`
	// Approved names the tools (with their grants) approved for the
	// session by a person ("session", "always"): their calls run without
	// asking again, as the local path's Cycle remembers them. Carried
	// across continue-as-new; a chat passes on a run's (RunResult.Approved)
	// to its next.
	Approved []string `json:"approved,omitempty"`
	// Settings are the run's own choices (model, system prompt, tools,
	// schema, lower budgets), which its model steps apply within their
	// worker's config; nil: the worker's.
	Settings *RunSettings `json:"settings,omitempty"`

	// Carried across continue-as-new.
	Turns   int          `json:"turns,omitempty"`
	Results []ToolResult `json:"results,omitempty"`
	Usage   loop.Usage   `json:"usage"`
	// ContinuedAsNew counts the times the run continued as new so far.
	ContinuedAsNew int `json:"continued_as_new,omitempty"`
	// UsedCalls counts the tool calls run so far (the budget).
	UsedCalls int `json:"used_calls,omitempty"`
}

// RunResult is how a run ended: an answer (Text), or an error kind (a
// loop.Kind, e.g. "provider", "max_turns") and message. A run that failed
// is a result, not a workflow failure: its records are in the session
// store either way.
type RunResult struct {
	Session      string     `json:"session"`
	Seq          int64      `json:"seq"`
	Text         Payload    `json:"text"`
	FinishReason string     `json:"finish_reason,omitempty"`
	Turns        int        `json:"turns"`
	Usage        loop.Usage `json:"usage"`
	ErrorKind    string     `json:"error_kind,omitempty"`
	Error        string     `json:"error,omitempty"`
	// ContinuedAsNew counts the times the run continued as new.
	ContinuedAsNew int `json:"continued_as_new,omitempty"`
	// Approved is RunInput.Approved with what this run's decisions
	// added.
	Approved []string `json:"approved,omitempty"`
}

// ModelStep is the input of the model activity: the run's prompt (first
// step) or the results of the calls the last step deferred.
type ModelStep struct {
	Session   string       `json:"session"`
	Seq       int64        `json:"seq"`
	Prompt    string       `json:"prompt,omitempty"`
	PromptRef *Payload     `json:"prompt_ref,omitempty"`
	Results   []ToolResult `json:"results,omitempty"`
	// Final: the run's turns are spent; the step stores the results'
	// tool messages and makes no model request.
	Final bool `json:"final,omitempty"`
	// UsedTokens and UsedCalls are what the run's earlier steps used,
	// counted against the worker's [llm] max_total_tokens and
	// max_tool_calls (the budgets are per run, as locally).
	UsedTokens int64 `json:"used_tokens,omitempty"`
	UsedCalls  int   `json:"used_calls,omitempty"`
	// Approved is the run's RunInput.Approved (as the run has it now).
	Approved []string `json:"approved,omitempty"`
	// Settings is the run's RunInput.Settings.
	Settings *RunSettings `json:"settings,omitempty"`
	// Turns counts the run's model requests before this step: a worker
	// ends the run past its own [llm] max_turns (RunInput.MaxTurns, the
	// starter's, only lowers it).
	Turns int `json:"turns,omitempty"`
}

// ModelOutput is what a model step did: the session's next seq, and
// either the calls to run, or the answer, or the run's error.
type ModelOutput struct {
	Seq          int64         `json:"seq"`
	Calls        []PendingCall `json:"calls,omitempty"`
	Done         bool          `json:"done,omitempty"`
	Text         Payload       `json:"text"`
	FinishReason string        `json:"finish_reason,omitempty"`
	Usage        loop.Usage    `json:"usage"`
	ErrorKind    string        `json:"error_kind,omitempty"`
	Error        string        `json:"error,omitempty"`
	// Recovered: an earlier attempt of this step had written its records,
	// so this one returned them without a model request.
	Recovered bool `json:"recovered,omitempty"`
}

// PendingCall is one tool call a model step left to the tool activities.
type PendingCall struct {
	ID   string  `json:"id"`
	Tool string  `json:"tool"`
	Args Payload `json:"args"`
	// Source is the tool's kind ("wasm", "mcp", ""): its queue.
	Source string `json:"source,omitempty"`
	// SideEffects: the tool may change something outside the call.
	SideEffects bool `json:"side_effects,omitempty"`
	// Timeout is the call's own limit (0: not known).
	Timeout time.Duration `json:"timeout,omitempty"`
	// Grant is the digest of the tool's registry.Grant as the model step
	// saw it (approvals and the retry policy were decided on it); the
	// call runs only where the tool has the same ("": not checked).
	Grant string `json:"grant,omitempty"`
	// Undecided, when set, is the grant a person is asked about: the call
	// needs a yes and has no decision yet. The workflow waits for one
	// (DecideUpdate, or a denial after RunInput.ApprovalTimeout), stores
	// it (DecideActivity), and runs the call only if it approves.
	Undecided *registry.Grant `json:"undecided,omitempty"`
}

// ToolStep is the input of the tool activity.
type ToolStep struct {
	Session string      `json:"session"`
	Call    PendingCall `json:"call"`
	// RetrySideEffects is the run's setting: a retried attempt of a call
	// whose tool has side effects here is not run without it.
	RetrySideEffects bool `json:"retry_side_effects,omitempty"`
	// Tenant is the run's RunSettings.Tenant: the call runs among the
	// tools the worker offers that tenant's runs (Activities.Tenants).
	Tenant string `json:"tenant,omitempty"`
}

// ToolResult is what one tool call returned: its output, or the kind and
// message of its error (a tool error is a result for the model, never an
// activity failure).
type ToolResult struct {
	ID         string          `json:"id"`
	Output     Payload         `json:"output"`
	Kind       registry.Kind   `json:"kind,omitempty"`
	Message    string          `json:"message,omitempty"`
	DurationMS int64           `json:"duration_ms,omitempty"`
	Audit      *registry.Audit `json:"audit,omitempty"`
	// Worker is the identity of the worker that ran the call.
	Worker string `json:"worker,omitempty"`
	// Whole, when set, is where the whole result is (its JSON over the
	// inline limit, audit included); the other fields but ID are empty.
	Whole *Payload `json:"whole,omitempty"`
}

// SideEffects reports whether a call with grant g may change something
// outside the call, so that running it twice is not the same as once:
// a WebAssembly tool that declares any permission but read (write,
// delete, network, shell, filesystem, a custom one), an MCP tool whose
// server does not mark it read-only. A tool of another kind that
// declares no permission has none.
func SideEffects(g registry.Grant) bool {
	if g.Source == "mcp" {
		for _, h := range g.Hints {
			if h == "read_only" {
				return false
			}
		}
		return true
	}
	for _, p := range g.Permissions {
		if p.String() != "read" {
			return true
		}
	}
	return false
}

// Records turns what a model step produced into session records and
// records back into a history. session.Codec is the one agrun uses (the
// default of Activities.Records), so that a session run on the cluster
// reads like a local one (agrun sessions, agrun audit).
type Records interface {
	Message(m loop.Message) (json.RawMessage, error)
	Request(ri loop.RequestInfo) (json.RawMessage, error)
	Call(ev *loop.ToolExecutionCompleted) (json.RawMessage, error)
	Decision(d loop.DecisionRecord) (json.RawMessage, error)
	// Approved returns the call ids that decision records among recs
	// approved.
	Approved(recs []json.RawMessage) map[string]bool
	// History returns the messages among recs, in order.
	History(recs []json.RawMessage) ([]loop.Message, error)
}

// blobs puts and gets payloads.
type blobs struct {
	store store.ObjectStore
	limit int
}

func (b blobs) put(ctx context.Context, data []byte) (Payload, error) {
	limit := b.limit
	if limit == 0 {
		limit = DefaultInlineLimit
	}
	if len(data) <= limit {
		return Payload{Data: data, Size: len(data)}, nil
	}
	if b.store == nil {
		return Payload{}, fmt.Errorf("a payload of %d bytes needs a blob store (over the inline limit of %d)", len(data), limit)
	}
	d := store.Digest(data)
	if err := b.store.Put(ctx, store.BlobKey(d), data); err != nil {
		return Payload{}, err
	}
	return Payload{Ref: store.BlobKey(d), Size: len(data)}, nil
}

// maxPayload caps what get reads back: a payload is at most what a step
// can produce (a tool's output, a reply), far under this.
const maxPayload = 256 << 20

func (b blobs) get(ctx context.Context, p Payload) ([]byte, error) {
	if p.Ref == "" {
		return p.Data, nil
	}
	if d, ok := strings.CutPrefix(p.Ref, "blobs/sha256/"); !ok || !store.ValidDigest(d) {
		return nil, fmt.Errorf("%q is not a payload reference", p.Ref)
	}
	if b.store == nil {
		return nil, errors.New("a payload by reference and no blob store")
	}
	data, err := b.store.Get(ctx, p.Ref, maxPayload)
	if err != nil {
		return nil, err
	}
	if "blobs/sha256/"+store.Digest(data) != p.Ref {
		return nil, fmt.Errorf("%w: %s", store.ErrDigest, p.Ref)
	}
	return data, nil
}
