package setup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/mcp"
)

// Sampler serves MCP servers' sampling requests (sampling/createMessage)
// with the [llm] model, under budgets: each request's maxTokens is
// capped ([mcp.NAME] sampling_max_tokens), the tokens each server's
// sampling spends in a run are bounded (sampling_max_run_tokens), and in
// a run they count in the run's own budget ([llm] max_total_tokens,
// through loop.Cycle.Spend). Outside a run (agrun call, agrun tools)
// both bounds apply to the whole process instead. A server whose
// sampling is "ask" (the default) is served only when Ask says yes.
//
// What a request records in the run (who decided, the model request it
// made: for the session and `agrun sessions show`) is made on the MCP
// SDK's goroutines, while the run's loop writes the same session; so it
// is queued, and the run's own goroutine hands it over (Flush, at each of
// the run's events, and EndRun), in the order it happened. The
// elicitation decisions of the servers (Elicit) are recorded the same way.
//
// A Sampler is safe for concurrent use.
type Sampler struct {
	cfg *config.Config
	// ask asks the person; nil: no one can be.
	ask func(ctx context.Context, q *SamplingQuestion) (bool, error)

	mu         sync.Mutex
	cycle      *loop.Cycle               // the run in progress; nil outside a run
	onDecision func(loop.DecisionRecord) // the run's record of decisions
	onRequest  func(loop.RequestInfo)    // the run's record of model requests
	queue      []queued                  // records made since the last Flush
	dropped    int                       // records over maxQueued since the last Flush
	used       map[string]int64          // server -> sampling tokens this run (or process)
	process    int64                     // every server's, outside runs ([llm] max_total_tokens)
	provider   func(int64) (loop.Provider, error)
}

// queued is one record waiting for Flush: a decision or a request.
type queued struct {
	decision *loop.DecisionRecord
	request  *loop.RequestInfo
}

// maxQueued bounds the records kept between two Flushes (the servers'
// rates bound them anyway: 10 requests a minute each); beyond it they
// are counted and dropped, and the next Flush records that they were.
const maxQueued = 1024

// SamplingQuestion is what the person is asked about a sampling request
// (Sampler's ask): the request, and the budget it would spend from.
type SamplingQuestion struct {
	*mcp.SamplingRequest
	// Used and Budget are the server's sampling tokens so far and its
	// sampling_max_run_tokens.
	Used, Budget int64
	// InRun says the budget is the run's; else the process's.
	InRun bool
}

// ErrNoOneToAsk is what a Sampler's ask returns when no person can be
// asked (no terminal, run --json): the request is declined, recorded as
// decided by "non-interactive".
var ErrNoOneToAsk = errors.New("no one can be asked")

// NewSampler returns the Sampler of cfg's [llm] model. ask asks the
// person about a server whose sampling is "ask"; nil declines those
// requests (no one can be asked: the decline is logged and recorded).
func NewSampler(cfg *config.Config, ask func(ctx context.Context, q *SamplingQuestion) (bool, error)) *Sampler {
	s := &Sampler{cfg: cfg, ask: ask, used: map[string]int64{}}
	s.provider = func(maxTokens int64) (loop.Provider, error) {
		l := cfg.LLM
		l.MaxOutputTokens = maxTokens
		return Provider(&l)
	}
	return s
}

// StartRun makes cycle's run the one sampling counts in, from now until
// EndRun: its budget, its record of decisions and of model requests
// (either may be nil). Each server's sampling budget starts anew.
func (s *Sampler) StartRun(cycle *loop.Cycle, onDecision func(loop.DecisionRecord), onRequest func(loop.RequestInfo)) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cycle, s.onDecision, s.onRequest = cycle, onDecision, onRequest
	s.used = map[string]int64{}
}

// Flush hands what was recorded since the last Flush to the run's
// record (StartRun's onDecision and onRequest), on the caller's
// goroutine: the run's own, between its events, so that the records
// never race the loop's writes to the session.
func (s *Sampler) Flush() {
	if s == nil {
		return
	}
	s.mu.Lock()
	q, dropped, onDecision, onRequest := s.queue, s.dropped, s.onDecision, s.onRequest
	s.queue, s.dropped = nil, 0
	s.mu.Unlock()
	for _, r := range q {
		switch {
		case r.decision != nil && onDecision != nil:
			onDecision(*r.decision)
		case r.request != nil && onRequest != nil:
			onRequest(*r.request)
		}
	}
	if dropped > 0 && onDecision != nil {
		onDecision(loop.DecisionRecord{ApprovalRequest: loop.ApprovalRequest{Tool: "mcp"}, Decision: loop.Decision{Answer: loop.Deny, By: "agrun",
			Reason: fmt.Sprintf("%d records of MCP servers' requests were not kept: over %d since the run's last event", dropped, maxQueued)}, Time: time.Now().UTC()})
	}
}

// EndRun ends what StartRun began: what is queued is flushed (on the
// caller's goroutine, as Flush), and later records are not the run's.
func (s *Sampler) EndRun() {
	if s == nil {
		return
	}
	s.Flush()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cycle, s.onDecision, s.onRequest = nil, nil, nil
	s.queue, s.dropped = nil, 0
}

// enqueue queues r for the run's record (Flush); outside a run (no
// record) it is dropped. The caller holds s.mu.
func (s *Sampler) enqueue(r queued) {
	if (r.decision != nil && s.onDecision == nil) || (r.request != nil && s.onRequest == nil) {
		return
	}
	if len(s.queue) >= maxQueued {
		s.dropped++
		return
	}
	s.queue = append(s.queue, r)
}

// For returns the mcp.ClientOptions.Sample of [mcp.name]; nil when its
// sampling is "deny" (no capability is declared).
func (s *Sampler) For(name string, srv config.MCPServer) func(context.Context, *mcp.SamplingRequest) (*mcp.SamplingReply, error) {
	if s == nil || srv.Sampling == "deny" {
		return nil
	}
	budget := srv.SamplingMaxRunTokens
	if budget <= 0 {
		budget = config.DefaultSamplingRunTokens
	}
	allow := srv.Sampling == "allow"
	return func(ctx context.Context, r *mcp.SamplingRequest) (*mcp.SamplingReply, error) {
		return s.serve(ctx, r, budget, allow)
	}
}

// refused is a refusal: recorded, and the reason for the server.
func (s *Sampler) refused(r *mcp.SamplingRequest, by, reason string) error {
	s.record(r, loop.Decision{Answer: loop.Deny, By: by, Reason: reason})
	return &mcp.SamplingRefused{Reason: reason}
}

// record queues a decision about r for the run's record.
func (s *Sampler) record(r *mcp.SamplingRequest, d loop.Decision) {
	last := ""
	if n := len(r.Messages); n > 0 {
		last = textsafe.Truncate(r.Messages[n-1].Text, 2<<10)
	}
	s.decided("sampling:"+r.Server, last, d)
}

// decided queues a decision about an MCP server's request (tool is
// "sampling:SERVER" or "elicitation:SERVER"; what, the request's text,
// already cleaned) for the run's record. A nil Sampler records nothing.
func (s *Sampler) decided(tool, what string, d loop.Decision) {
	if s == nil {
		return
	}
	rec := loop.DecisionRecord{ApprovalRequest: loop.ApprovalRequest{Tool: tool, Arguments: what}, Decision: d, Time: time.Now().UTC()}
	s.mu.Lock()
	s.enqueue(queued{decision: &rec})
	s.mu.Unlock()
}

// left is what the budgets leave for a request of server: the tokens
// left of the server's sampling budget, and a refusal if a budget is
// spent.
func (s *Sampler) left(server string, budget int64) (int64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := s.used[server]
	where := "in this run"
	if s.cycle == nil {
		where = "in this process (outside a run)"
	}
	if used >= budget {
		return 0, fmt.Sprintf("the sampling budget of %s is spent: %d of its %d tokens %s ([mcp.%s] sampling_max_run_tokens)", server, used, budget, where, server)
	}
	if s.cycle != nil {
		if u, limit, running := s.cycle.RunUsage(); running && limit > 0 && u.Total() >= limit {
			return 0, fmt.Sprintf("the run's token budget is spent: %d of its %d tokens ([llm] max_total_tokens, or run --max-tokens)", u.Total(), limit)
		}
	} else if limit := s.cfg.LLM.MaxTotalTokens; limit > 0 && s.process >= limit {
		return 0, fmt.Sprintf("the token budget is spent: sampling used %d of %d tokens in this process ([llm] max_total_tokens)", s.process, limit)
	}
	return budget - used, ""
}

func (s *Sampler) serve(ctx context.Context, r *mcp.SamplingRequest, budget int64, allow bool) (*mcp.SamplingReply, error) {
	left, why := s.left(r.Server, budget)
	if why != "" {
		return nil, s.refused(r, "budget", why)
	}
	r.MaxTokens = min(r.MaxTokens, left)
	by := "config"
	if !allow {
		if s.ask == nil {
			return nil, s.refused(r, "non-interactive", fmt.Sprintf(`no one could be asked to allow it ([mcp.%s] sampling = "allow" serves it unasked)`, r.Server))
		}
		s.mu.Lock()
		q := &SamplingQuestion{SamplingRequest: r, Used: s.used[r.Server], Budget: budget, InRun: s.cycle != nil}
		s.mu.Unlock()
		ok, err := s.ask(ctx, q)
		if errors.Is(err, ErrNoOneToAsk) {
			return nil, s.refused(r, "non-interactive", fmt.Sprintf(`no one could be asked to allow it ([mcp.%s] sampling = "allow" serves it unasked)`, r.Server))
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, s.refused(r, "user", "the user declined it")
		}
		by = "user"
	}
	s.record(r, loop.Decision{Answer: loop.ApproveOnce, By: by})
	return s.complete(ctx, r)
}

// complete asks the model, and counts what it cost.
func (s *Sampler) complete(ctx context.Context, r *mcp.SamplingRequest) (*mcp.SamplingReply, error) {
	p, err := s.provider(r.MaxTokens)
	if err != nil {
		return nil, &mcp.SamplingRefused{Reason: "agrun's model is not configured: " + err.Error()}
	}
	if t := s.cfg.LLM.Timeout.Std(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	req := &loop.Request{System: r.System, MaxReplyBytes: int(r.MaxTokens)*16 + 4096}
	size := len(r.System)
	for _, m := range r.Messages {
		role := loop.RoleUser
		if m.Role == "assistant" {
			role = loop.RoleAssistant
		}
		req.Messages = append(req.Messages, loop.Message{Role: role, Content: m.Text})
		size += len(m.Text)
	}
	start := time.Now()
	rep, err := p.Request(ctx, req)
	info := loop.RequestInfo{Model: p.Info().Model, Start: start, Duration: time.Since(start)}
	if err != nil {
		info.Error, info.ErrorKind = textsafe.Clean(err.Error(), 300), loop.KindOf(err)
		s.count(r.Server, loop.Usage{}, info)
		return nil, &mcp.SamplingRefused{Reason: "the model request failed: " + textsafe.Clean(err.Error(), 300)}
	}
	u := rep.Usage
	if u.Total() == 0 {
		// A provider that reports no usage: an estimate (4 bytes a token)
		// still counts against the budgets.
		u = loop.Usage{PromptTokens: int64(size/4 + 1), CompletionTokens: int64(len(rep.Content)/4 + 1)}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	info.Usage, info.FinishReason, info.ResponseModel, info.ResponseID = u, rep.FinishReason, rep.Model, rep.ID
	if rep.Model != "" {
		info.Model = rep.Model
	}
	s.count(r.Server, u, info)
	stop := "endTurn"
	if rep.FinishReason == "length" {
		stop = "maxTokens"
	}
	return &mcp.SamplingReply{Text: rep.Content, Model: info.Model, StopReason: stop}, nil
}

// count adds a request's tokens to the server's budget and the run's
// (or the process's), and records the request.
func (s *Sampler) count(server string, u loop.Usage, info loop.RequestInfo) {
	s.mu.Lock()
	s.used[server] += u.Total()
	cycle := s.cycle
	if cycle == nil {
		s.process += u.Total()
	}
	s.enqueue(queued{request: &info})
	s.mu.Unlock()
	if cycle != nil {
		cycle.Spend(u) // safe from any goroutine, and checked before the run's next request
	}
}
