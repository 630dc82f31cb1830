package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/internal/testing/pgtest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session/pgstore"
)

// The PostgreSQL session store is the cluster's live side channel.
var _ LiveBus = (*pgstore.Sessions)(nil)

// TestLiveViewNeverShowsTextTwice: batches are shown only where they
// extend the text shown — a retried attempt starting over at 0 adds only
// what is new, one that wrote otherwise or a gap stops the live text —
// and the stored reply completes or restates it.
func TestLiveViewNeverShowsTextTwice(t *testing.T) {
	type step struct {
		d   liveDelta
		out string // "" none
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		stored  string
		restate bool
		rest    string
	}{
		{"in order", []step{{liveDelta{Seq: 2, Text: "Hel"}, "Hel"}, {liveDelta{Seq: 2, Off: 3, Text: "lo"}, "lo"}}, "Hello!", false, "!"},
		{"retried same", []step{{liveDelta{Seq: 2, Text: "Hel"}, "Hel"}, {liveDelta{Seq: 2, Text: "He"}, ""}, {liveDelta{Seq: 2, Off: 2, Text: "llo"}, "lo"}}, "Hello", false, ""},
		{"retried otherwise", []step{{liveDelta{Seq: 2, Text: "Bon"}, "Bon"}, {liveDelta{Seq: 2, Text: "Hello"}, ""}}, "Hello", true, "Hello"},
		{"gap", []step{{liveDelta{Seq: 2, Text: "He"}, "He"}, {liveDelta{Seq: 2, Off: 4, Text: "o"}, ""}, {liveDelta{Seq: 2, Off: 2, Text: "ll"}, ""}}, "Hello", false, "llo"},
		{"stored step", []step{{liveDelta{Seq: 0, Text: "old"}, ""}}, "Hi", false, "Hi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := liveView{seq: -1}
			for i, s := range tc.steps {
				got := ""
				if ev := v.take(s.d, 1); ev != nil {
					got = ev.(*loop.TextDelta).Text
				}
				if got != s.out {
					t.Fatalf("step %d shows %q, want %q", i, got, s.out)
				}
			}
			evs := v.stored(3, tc.stored)
			if len(evs) == 0 {
				if tc.rest != "" || tc.restate {
					t.Fatalf("stored: nothing, want %q", tc.rest)
				}
				return
			}
			_, restated := evs[0].(*ReplyRestated)
			last := evs[len(evs)-1].(*loop.TextDelta).Text
			if restated != tc.restate || last != tc.rest {
				t.Fatalf("stored: restated %v, %q; want %v, %q", restated, last, tc.restate, tc.rest)
			}
		})
	}
}

// liveRun runs prompt on a real Temporal server and PostgreSQL and
// returns the events Follow yielded and the reply stored.
func liveRun(t *testing.T, script ...chattest.Reply) ([]loop.Event, string) {
	return liveRunWith(t, nil, script...)
}

func liveRunWith(t *testing.T, tools []registry.Tool, script ...chattest.Reply) ([]loop.Event, string) {
	addr := devtemporal.Start(t)
	pg, err := pgstore.New(context.Background(), pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	srv := chattest.New(t, script...)
	a, _ := newActivities(t, srv, tools...)
	a.Records, a.Sessions = nil, pg
	tc := devtemporal.Client(t, addr)
	q := QueuesFor("live-")
	ctx, cancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	go func() { werr <- RunWorker(ctx, tc, a, WorkerOptions{Queues: q}) }()
	defer func() { cancel(); <-werr }()
	cl := &Client{Temporal: tc, Sessions: pg, Blobs: a.Blobs, Defaults: RunInput{Queues: q}}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	run, from, err := cl.Start(rctx, "live", "hi")
	if err != nil {
		t.Fatal(err)
	}
	var evs []loop.Event
	for ev, err := range cl.Follow(rctx, run, "live", from) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	var res RunResult
	if err := run.Get(rctx, &res); err != nil {
		t.Fatal(err)
	}
	text, err := cl.Text(rctx, res)
	if err != nil {
		t.Fatal(err)
	}
	return evs, text
}

// shownText is the text a reader of evs shows at the end: the text
// deltas, less those a ReplyRestated voids.
func shownText(evs []loop.Event) (text string, deltas int, restated bool) {
	var b strings.Builder
	for _, ev := range evs {
		switch ev := ev.(type) {
		case *loop.TextDelta:
			b.WriteString(ev.Text)
			deltas++
		case *ReplyRestated:
			b.Reset()
			restated = true
		}
	}
	return b.String(), deltas, restated
}

func paced(parts ...string) chattest.Reply {
	var cs []string
	for _, p := range parts {
		cs = append(cs, chattest.TextChunk(p))
	}
	cs = append(cs, chattest.FinishChunk("stop"))
	return chattest.Reply{Chunks: cs, ChunkEvery: 150 * time.Millisecond}
}

// TestLiveTextOnTheCluster (issue 28): on PostgreSQL, a model step's
// reply streams to Follow as it is written, in several text deltas,
// whose concatenation is the reply stored.
func TestLiveTextOnTheCluster(t *testing.T) {
	evs, stored := liveRun(t, paced("The ", "quick ", "brown ", "fox ", "jumps."))
	text, n, restated := shownText(evs)
	if text != stored || stored != "The quick brown fox jumps." || n < 3 || restated {
		t.Fatalf("shown %q in %d deltas (restated %v), stored %q", text, n, restated, stored)
	}
}

// TestLiveTextAfterAToolCall: the live text of the reply after a tool
// call comes after the records of the step that asked for the call (its
// turn_complete and tool_started); the call's tool_completed is stored
// with the next step's records, so it comes when that step is stored,
// after its live text (docs/SCALING.md, Live text).
func TestLiveTextAfterAToolCall(t *testing.T) {
	evs, stored := liveRunWith(t, []registry.Tool{&fakeTool{name: "t", source: "wasm"}},
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{}`}}}, paced("Done ", "with ", "it."))
	text, n, _ := shownText(evs)
	started, completed := -1, -1
	for i, ev := range evs {
		switch ev.(type) {
		case *loop.ToolExecutionStarted:
			started = i
		case *loop.ToolExecutionCompleted:
			completed = i
		case *loop.TextDelta:
			if started < 0 {
				t.Fatalf("a text delta before the call's start: %s", eventsOf(evs))
			}
		}
	}
	if completed < 0 || text != stored || stored != "Done with it." || n < 2 {
		t.Fatalf("shown %q in %d deltas, stored %q, events %s", text, n, stored, eventsOf(evs))
	}
}

// TestLiveTextOfARetriedStep: a step whose stream broke off is retried
// (another activity attempt); what its first attempt streamed is not
// shown again, and the text shown is the reply stored.
func TestLiveTextOfARetriedStep(t *testing.T) {
	evs, stored := liveRun(t, chattest.Reply{Text: "Hello, wor", Cut: true}, paced("Hello, ", "wor", "ld!"))
	text, n, restated := shownText(evs)
	var all strings.Builder
	for _, ev := range evs {
		if d, ok := ev.(*loop.TextDelta); ok {
			all.WriteString(d.Text)
		}
	}
	if stored != "Hello, world!" || text != stored || all.String() != stored || restated || n < 2 {
		t.Fatalf("shown %q (all deltas %q, %d, restated %v), stored %q", text, all.String(), n, restated, stored)
	}
}

// TestLiveTextOfARetryThatWroteOtherwise: the retried attempt's reply
// differs from what the first streamed: Follow restates the reply whole
// as stored.
func TestLiveTextOfARetryThatWroteOtherwise(t *testing.T) {
	evs, stored := liveRun(t, chattest.Reply{Text: "Bonjour tout le monde", Cut: true}, paced("Hello ", "there"))
	text, _, _ := shownText(evs)
	if stored != "Hello there" || text != stored {
		t.Fatalf("shown %q, stored %q (events %v)", text, stored, evs)
	}
}

// BenchmarkLive measures the live side channel on a real PostgreSQL
// (docs/SCALING.md, "Live text"):
//
//	go test -run '^$' -bench Live -benchtime 200x ./cluster
//
// bus: a batch from Notify to a listener's channel (what LISTEN/NOTIFY
// adds); delta: a model's text delta from the step (livePub) to the
// listener, batching included (a delta that opens a batch waits
// liveEvery for more).
func BenchmarkLive(b *testing.B) {
	pg, err := pgstore.New(context.Background(), pgtest.Start(b))
	if err != nil {
		b.Fatal(err)
	}
	defer pg.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := pg.Listen(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("bus", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			t0 := time.Now()
			if err := pg.Notify(ctx, "bench", []byte(`{"text":"x"}`)); err != nil {
				b.Fatal(err)
			}
			<-ch
			total += time.Since(t0)
		}
		b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/batch")
	})
	b.Run("delta", func(b *testing.B) {
		p := newLivePub(ctx, pg, "bench", 0)
		defer p.close()
		var total time.Duration
		for b.Loop() {
			t0 := time.Now()
			p.add(false, "token ")
			<-ch
			total += time.Since(t0)
		}
		b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/delta")
	})
}

func eventsOf(evs []loop.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(ev.EventType())
		if d, ok := ev.(*loop.TextDelta); ok {
			b.WriteString("(" + d.Text + ")")
		}
		b.WriteString(" ")
	}
	return b.String()
}

// TestLiveReasoning: a reply's reasoning streams live too (shown by
// agrun run --show-reasoning); the record keeps it but Follow does not
// replay it, so reasoning a follower missed live is not shown.
func TestLiveReasoning(t *testing.T) {
	// Paced: reasoning is not replayed from the record, so only what
	// streams before the step is stored is shown.
	evs, stored := liveRun(t, chattest.Reply{Chunks: []string{
		chattest.ReasoningChunk("reasoning_content", "thinking "), chattest.ReasoningChunk("reasoning_content", "it over"),
		chattest.TextChunk("Yes."), chattest.FinishChunk("stop"),
	}, ChunkEvery: 150 * time.Millisecond})
	var reasoning string
	for _, ev := range evs {
		if r, ok := ev.(*loop.ReasoningDelta); ok {
			reasoning += r.Text
		}
	}
	text, _, _ := shownText(evs)
	if reasoning != "thinking it over" || text != stored || stored != "Yes." {
		t.Fatalf("reasoning %q, shown %q, stored %q: %s", reasoning, text, stored, eventsOf(evs))
	}
}
