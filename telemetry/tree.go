package telemetry

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// maxTreeSpans bounds the spans kept for WriteTree.
const maxTreeSpans = 10_000

// treeRecorder keeps ended spans for WriteTree.
type treeRecorder struct {
	mu      sync.Mutex
	spans   []sdktrace.ReadOnlySpan
	dropped int
}

func (r *treeRecorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *treeRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.spans) >= maxTreeSpans {
		r.dropped++
		return
	}
	r.spans = append(r.spans, s)
}
func (r *treeRecorder) Shutdown(context.Context) error   { return nil }
func (r *treeRecorder) ForceFlush(context.Context) error { return nil }

// barWidth is the width of the waterfall's bars.
const barWidth = 32

// WriteTree prints every trace recorded so far (Config.Tree) as an
// indented waterfall: each span's name, a bar placing it in its trace's
// time, its duration and, for model requests, the tokens; failed spans
// end in their error kind.
func (t *Telemetry) WriteTree(w io.Writer) {
	if t == nil || t.tree == nil {
		return
	}
	t.tree.mu.Lock()
	spans := slices.Clone(t.tree.spans)
	dropped := t.tree.dropped
	t.tree.mu.Unlock()
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && ids[p.SpanID()] {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) }
	slices.SortFunc(roots, byStart)
	for _, root := range roots {
		t0, total := root.StartTime(), root.EndTime().Sub(root.StartTime())
		fmt.Fprintf(w, "trace %s (%s)\n", root.SpanContext().TraceID(), round(total))
		var walk func(s sdktrace.ReadOnlySpan, depth int)
		walk = func(s sdktrace.ReadOnlySpan, depth int) {
			name := strings.Repeat("  ", depth) + textsafe.Clean(s.Name(), 60)
			fmt.Fprintf(w, "%-44s %s %8s%s\n", name, bar(t0, total, s.StartTime(), s.EndTime()), round(s.EndTime().Sub(s.StartTime())), detail(s))
			kids := children[s.SpanContext().SpanID()]
			slices.SortFunc(kids, byStart)
			for _, k := range kids {
				walk(k, depth+1)
			}
		}
		walk(root, 0)
	}
	if dropped > 0 {
		fmt.Fprintf(w, "(%d more spans not kept)\n", dropped)
	}
}

func bar(t0 time.Time, total time.Duration, start, end time.Time) string {
	if total <= 0 {
		return strings.Repeat("█", barWidth)
	}
	from := int(float64(start.Sub(t0)) / float64(total) * barWidth)
	to := int(float64(end.Sub(t0)) / float64(total) * barWidth)
	from = min(max(from, 0), barWidth-1)
	to = min(max(to, from+1), barWidth)
	return strings.Repeat(" ", from) + strings.Repeat("█", to-from) + strings.Repeat(" ", barWidth-to)
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// detail is what follows a span's duration: tokens for a request, the
// error kind of a failure.
func detail(s sdktrace.ReadOnlySpan) string {
	var in, out int64
	var kind string
	for _, a := range s.Attributes() {
		switch a.Key {
		case "gen_ai.usage.input_tokens":
			in = a.Value.AsInt64()
		case "gen_ai.usage.output_tokens":
			out = a.Value.AsInt64()
		case "error.type":
			kind = a.Value.AsString()
		}
	}
	var b strings.Builder
	if in > 0 || out > 0 {
		fmt.Fprintf(&b, "  %d in / %d out tokens", in, out)
	}
	if kind != "" {
		fmt.Fprintf(&b, "  error (%s)", textsafe.Clean(kind, 40))
	}
	return b.String()
}
