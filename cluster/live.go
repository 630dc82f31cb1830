package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agcore/agrun/loop"
)

// LiveBus is the side channel a model step streams its reply's text
// through while the step runs (docs/SCALING.md, "Live text"): best
// effort, never the record — what the step stores is the reply. A
// session store that is one (session/pgstore: PostgreSQL LISTEN/NOTIFY)
// is used as one by Activities and Client; with any other, replies
// arrive whole. Implementations are safe for concurrent use.
type LiveBus interface {
	// Notify sends payload (under NOTIFY's 8000 bytes) to the session's
	// listeners now; nothing is kept.
	Notify(ctx context.Context, session string, payload []byte) error
	// Listen yields the session's payloads until ctx ends (then the
	// channel is closed); it may drop some.
	Listen(ctx context.Context, session string) (<-chan []byte, error)
}

// Live text batching: a batch goes out every liveEvery, or at liveChunk
// bytes of text (JSON may escape a byte into six: a batch stays under
// NOTIFY's 8000 bytes whatever the text), through a queue of liveQueue
// batches; a batch the queue has no room for is dropped.
const (
	liveEvery = 50 * time.Millisecond
	liveChunk = 1200
	liveQueue = 64
	liveSend  = 2 * time.Second // the longest a batch may take to send
)

// liveDelta is one batch on the bus: Text starts at byte Off of the
// reply (Reasoning: of its reasoning) the model step at record Seq
// streams. A reader keeps the text it showed for the step and shows of
// a batch only what extends it, so that text is never shown twice: a
// retried attempt (of the loop or of the activity) starts again at 0.
type liveDelta struct {
	Session   string `json:"session"`
	Seq       int64  `json:"seq"`
	Off       int    `json:"off"`
	Reasoning bool   `json:"reasoning,omitempty"`
	Text      string `json:"text"`
	// Sent is when the batch was sent (Unix nanoseconds): for the
	// latency measurement (BenchmarkLive).
	Sent int64 `json:"sent,omitempty"`
}

// livePub streams one model step's deltas. Add never blocks on the bus;
// close flushes and returns without waiting for the sends.
type livePub struct {
	bus     LiveBus
	ctx     context.Context // without the step's cancellation
	session string
	seq     int64

	mu     sync.Mutex
	pend   strings.Builder
	reason bool   // what pend holds
	off    [2]int // bytes batched so far: text, reasoning
	timer  *time.Timer
	closed bool
	q      chan []byte
}

func newLivePub(ctx context.Context, bus LiveBus, session string, seq int64) *livePub {
	p := &livePub{bus: bus, ctx: context.WithoutCancel(ctx), session: session, seq: seq, q: make(chan []byte, liveQueue)}
	go func() {
		for b := range p.q {
			ctx, cancel := context.WithTimeout(p.ctx, liveSend)
			_ = p.bus.Notify(ctx, p.session, b) // best effort: the record is the reply
			cancel()
		}
	}()
	return p
}

// event takes the loop's event: text and reasoning deltas are batched; a
// retry of the loop's starts the reply over at offset 0.
func (p *livePub) event(ev loop.Event) {
	if p == nil {
		return
	}
	switch ev := ev.(type) {
	case *loop.TextDelta:
		p.add(false, ev.Text)
	case *loop.ReasoningDelta:
		p.add(true, ev.Text)
	case *loop.Retry:
		p.mu.Lock()
		p.flushLocked()
		p.off = [2]int{}
		p.mu.Unlock()
	}
}

func (p *livePub) add(reasoning bool, s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || s == "" {
		return
	}
	if p.pend.Len() > 0 && p.reason != reasoning {
		p.flushLocked()
	}
	p.reason = reasoning
	p.pend.WriteString(s)
	if p.pend.Len() >= liveChunk {
		p.flushLocked()
		return
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(liveEvery, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.timer = nil
			p.flushLocked()
		})
	}
}

// flushLocked sends what is pending, in batches of at most liveChunk
// bytes cut at rune boundaries.
func (p *livePub) flushLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	s := p.pend.String()
	p.pend.Reset()
	k := 0
	if p.reason {
		k = 1
	}
	for len(s) > 0 {
		n := min(len(s), liveChunk)
		for n < len(s) && n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		if n == 0 {
			n = min(len(s), liveChunk)
		}
		b, _ := json.Marshal(liveDelta{Session: p.session, Seq: p.seq, Off: p.off[k], Reasoning: p.reason, Text: s[:n], Sent: time.Now().UnixNano()})
		p.off[k] += n
		s = s[n:]
		if p.closed {
			continue
		}
		select {
		case p.q <- b:
		default: // overloaded: dropped (a reader sees a gap and waits for the record)
		}
	}
}

// close sends what is pending and ends the stream.
func (p *livePub) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.flushLocked()
	p.closed = true
	close(p.q)
}

// liveView is a reader's view of a run's live text: the step it shows
// and what it showed of its reply and reasoning.
type liveView struct {
	seq    int64 // the step shown (-1: none)
	shown  [2]string
	broken [2]bool // a batch was missed or disagreed: nothing more until the record
}

// take returns what of d extends the text shown (nil: nothing new);
// stored is the session's next record to read: batches of steps before it
// are the records' (already shown).
func (v *liveView) take(d liveDelta, stored int64) loop.Event {
	if d.Seq < stored || d.Seq < v.seq {
		return nil
	}
	if d.Seq > v.seq {
		*v = liveView{seq: d.Seq}
	}
	k := 0
	if d.Reasoning {
		k = 1
	}
	shown := v.shown[k]
	if v.broken[k] || d.Off > len(shown) {
		v.broken[k] = true
		return nil
	}
	overlap := shown[d.Off:]
	if len(overlap) >= len(d.Text) {
		if !strings.HasPrefix(overlap, d.Text) {
			v.broken[k] = true
		}
		return nil
	}
	if !strings.HasPrefix(d.Text, overlap) {
		v.broken[k] = true // a retried attempt that wrote otherwise
		return nil
	}
	fresh := d.Text[len(overlap):]
	v.shown[k] += fresh
	if d.Reasoning {
		return &loop.ReasoningDelta{Text: fresh}
	}
	return &loop.TextDelta{Text: fresh}
}

// stored reconciles the reply stored at record rec with what was shown
// live: the events to yield in place of the record's TextDelta. If the
// stored reply begins with the text shown, the rest of it; otherwise
// (the step was retried and wrote otherwise) a ReplyRestated and the
// reply whole. Either way what was shown, as ReplyRestated says to
// read it, is the stored reply.
func (v *liveView) stored(rec int64, text string) []loop.Event {
	if v.seq < 0 || v.seq > rec || v.shown[0] == "" {
		return []loop.Event{&loop.TextDelta{Text: text}}
	}
	shown := v.shown[0]
	v.shown[0], v.broken[0] = "", false
	if strings.HasPrefix(text, shown) {
		if rest := text[len(shown):]; rest != "" {
			return []loop.Event{&loop.TextDelta{Text: rest}}
		}
		return nil
	}
	return []loop.Event{&ReplyRestated{Shown: len(shown)}, &loop.TextDelta{Text: text}}
}

// ReplyRestated is the event Follow yields when the text it streamed of
// a reply (live, LiveBus) is not how the stored reply begins — the step
// was retried and its model wrote otherwise: the Shown bytes of text
// yielded since the step began are void, and the TextDelta that follows
// is the reply whole, as stored.
type ReplyRestated struct {
	Shown int // bytes of text yielded that are void
}

// EventType implements loop.Event.
func (*ReplyRestated) EventType() string { return "reply_restated" }

// MarshalJSON gives {"type":"reply_restated","shown":n}.
func (e *ReplyRestated) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type  string `json:"type"`
		Shown int    `json:"shown"`
	}{e.EventType(), e.Shown})
}
