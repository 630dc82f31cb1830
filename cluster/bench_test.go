package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/devtemporal"
	"github.com/agcore/agrun/internal/testing/testprovider"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// The figures of docs/SCALING.md:
//
//	go test -run '^$' -bench 'Cluster|Local' -benchtime 20x ./cluster
//
// BenchmarkLocalRun and BenchmarkClusterRun run the same session — `calls`
// model turns that each ask for one call of an instant tool, then an
// answer — through the loop in process and through the cluster (a real
// Temporal dev server, one worker in process, sessions in memory); the
// difference per call is the cluster's overhead per tool call, with the
// calls run where the workflow task runs (local, the default) and as
// activity tasks on their queue (queued: WorkerOptions.QueuedCalls).
// BenchmarkClusterWorkers runs sessions whose one call takes 200 ms of
// waiting (slow=tool: I/O, a remote API; slow=model: each model request
// takes 200 ms instead) on 1, 2 and 4 workers of one
// activity slot each (and one local call slot, unless queued), all
// sessions started at once: sessions per minute.

// benchScript is the replies of n sessions of calls tool turns each.
func benchScript(n, calls int) []chattest.Reply {
	var s []chattest.Reply
	for i := range n {
		for j := range calls {
			s = append(s, chattest.Reply{ToolCalls: []chattest.Call{{ID: fmt.Sprintf("c%d_%d", i, j), Name: "t", Args: `{"i":` + strconv.Itoa(j) + `}`}}})
		}
		s = append(s, chattest.Reply{Text: "done"})
	}
	return s
}

func benchTool(wait time.Duration) *fakeTool {
	return &fakeTool{name: "t", source: "wasm", perms: []permission.Permission{permission.Read},
		run: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			if wait > 0 {
				time.Sleep(wait)
			}
			return json.RawMessage(`{"ok":true}`), nil
		}}
}

func BenchmarkLocalRun(b *testing.B) {
	for _, calls := range []int{1, 5} {
		b.Run(fmt.Sprintf("calls=%d", calls), func(b *testing.B) {
			srv := chattest.New(b, benchScript(b.N, calls)...)
			reg := registry.New()
			reg.Register(benchTool(0))
			b.ResetTimer()
			for range b.N {
				c, err := loop.New(loop.Config{Provider: testprovider.Chat(b, srv.URL), Limits: loop.Limits{MaxTurns: calls + 1}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.SubmitWithTools(context.Background(), "go", reg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*calls)/1000, "ms/call")
		})
	}
}

// benchCluster starts a dev server and returns a client of it.
func benchCluster(b *testing.B) client.Client {
	addr := devtemporal.Start(b)
	tc := devtemporal.Client(b, addr)
	return tc
}

// startWorkers runs n workers of slots activity slots each until the
// benchmark ends; queued: WorkerOptions.QueuedCalls.
func startWorkers(b *testing.B, tc client.Client, a *Activities, q Queues, n, slots int, queued bool) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := RunWorker(ctx, tc, a, WorkerOptions{Queues: q, Concurrency: slots, Identity: fmt.Sprintf("w%d", i), QueuedCalls: queued}); err != nil {
				b.Error(err)
			}
		}()
	}
	b.Cleanup(func() { cancel(); wg.Wait() })
}

func BenchmarkClusterRun(b *testing.B) {
	tc := benchCluster(b)
	for _, calls := range []int{1, 5} {
		for _, dispatch := range []string{"local", "queued"} {
			b.Run(fmt.Sprintf("calls=%d/%s", calls, dispatch), func(b *testing.B) {
				srv := chattest.New(b, benchScript(b.N, calls)...)
				a, st := newActivities(b, srv, benchTool(0))
				q := QueuesFor(fmt.Sprintf("bench%d%s-", calls, dispatch))
				startWorkers(b, tc, a, q, 1, 8, dispatch == "queued")
				cl := &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: RunInput{Queues: q, MaxTurns: calls + 1}}
				b.ResetTimer()
				for i := range b.N {
					res, err := cl.Run(context.Background(), fmt.Sprintf("s%d%s-%d", calls, dispatch, i), "go")
					if err != nil || res.ErrorKind != "" {
						b.Fatalf("%+v %v", res, err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*calls)/1000, "ms/call")
				b.ReportMetric(medianGap(srv.Requests()), "ms/call-gap")
			})
		}
	}
}

// medianGap is the median time, in ms, from the model server's answer
// asking for a call to the next request of the session (the one carrying
// the call's result): a tool call's whole cost as the model server sees
// it, what issue 28 measures. The sessions run one after another, so a
// request's predecessor is its session's.
func medianGap(reqs []chattest.Request) float64 {
	var gaps []float64
	for i := 1; i < len(reqs); i++ {
		m := reqs[i].Messages
		if len(m) == 0 || m[len(m)-1].Role != "tool" || reqs[i-1].Answered.IsZero() {
			continue
		}
		gaps = append(gaps, float64(reqs[i].Received.Sub(reqs[i-1].Answered).Microseconds())/1000)
	}
	if len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

func BenchmarkClusterWorkers(b *testing.B) {
	tc := benchCluster(b)
	for _, slow := range []string{"tool", "model"} {
		for _, dispatch := range []string{"local", "queued"} {
			for _, workers := range []int{1, 2, 4} {
				b.Run(fmt.Sprintf("slow=%s/%s/workers=%d", slow, dispatch, workers), func(b *testing.B) {
					benchWorkers(b, tc, slow, dispatch, workers)
				})
			}
		}
	}
}

// benchWorkers runs b.N sessions at once, each one call, on workers
// workers of one slot each; slow says what waits 200 ms: the tool, or
// each model request.
func benchWorkers(b *testing.B, tc client.Client, slow, dispatch string, workers int) {
	var toolWait, modelWait time.Duration
	if slow == "tool" {
		toolWait = 200 * time.Millisecond
	} else {
		modelWait = 200 * time.Millisecond
	}
	// The sessions run at once: each is answered by where it is (a call
	// first, then the answer), not by a shared script.
	srv := chattest.New(b)
	srv.Respond(func(r chattest.Request) chattest.Reply {
		if m := r.Messages; len(m) > 0 && m[len(m)-1].Role == "tool" {
			return chattest.Reply{Text: "done", Delay: modelWait}
		}
		return chattest.Reply{ToolCalls: []chattest.Call{{ID: "c1", Name: "t", Args: `{}`}}, Delay: modelWait}
	})
	a, st := newActivities(b, srv, benchTool(toolWait))
	q := QueuesFor(fmt.Sprintf("pool%s%s%d-", slow, dispatch, workers))
	startWorkers(b, tc, a, q, workers, 1, dispatch == "queued")
	cl := &Client{Temporal: tc, Sessions: st, Blobs: a.Blobs, Defaults: RunInput{Queues: q}}
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range b.N {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cl.Run(context.Background(), fmt.Sprintf("p%s%s%d-%d", slow, dispatch, workers, i), "go")
			if err != nil || res.ErrorKind != "" {
				b.Errorf("%+v %v", res, err)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Minutes(), "sessions/min")
}
