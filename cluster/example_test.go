package cluster_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"

	tlog "go.temporal.io/sdk/log"

	"go.temporal.io/sdk/client"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// A cluster worker inside an app's own binary: the app's tools (here a
// Go function), its model, its session store, served on the app's
// Temporal; then a run of a session through the cluster. The app writes
// no record format of its own: the steps store session.Codec's records,
// which `agrun sessions show` reads. The addresses come from the
// environment here (AGRUN_EXAMPLE_TEMPORAL, AGRUN_EXAMPLE_MODEL);
// TestExampleWorkerInApp runs this against a real Temporal dev server
// and a fake model server.
func Example_workerInApp() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	upper, err := registry.NewFunc("upper", "Upper-cases a text.",
		func(ctx context.Context, in struct {
			Text string `json:"text"`
		}) (string, error) {
			return strings.ToUpper(in.Text), nil
		})
	if err != nil {
		log.Fatal(err)
	}
	reg := registry.New()
	if err := reg.Register(upper); err != nil {
		log.Fatal(err)
	}
	model, err := chat.New(chat.Config{BaseURL: os.Getenv("AGRUN_EXAMPLE_MODEL"), APIKey: "unused", Model: "gpt-4.1-mini"})
	if err != nil {
		log.Fatal(err)
	}
	dir, _ := os.MkdirTemp("", "app")
	defer os.RemoveAll(dir)
	sessions, err := session.OpenFiles(dir + "/sessions")
	if err != nil {
		log.Fatal(err)
	}
	blobs, err := store.NewDirObjects(dir + "/objects")
	if err != nil {
		log.Fatal(err)
	}

	tc, err := client.Dial(client.Options{HostPort: os.Getenv("AGRUN_EXAMPLE_TEMPORAL"),
		Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		log.Fatal(err)
	}
	defer tc.Close()
	queues := cluster.QueuesFor("myapp-")
	worker := &cluster.Activities{
		Registry: reg,
		Loop:     loop.Config{Provider: model},
		Sessions: sessions,
		Blobs:    blobs,
	}
	done := make(chan error, 1)
	go func() { done <- cluster.RunWorker(ctx, tc, worker, cluster.WorkerOptions{Queues: queues}) }()

	runs := &cluster.Client{Temporal: tc, Sessions: sessions, Blobs: blobs, Defaults: cluster.RunInput{Queues: queues}}
	res, err := runs.Run(ctx, "demo", "Shout hello")
	if err != nil {
		log.Fatal(err)
	}
	text, _ := runs.Text(ctx, res)
	fmt.Println("answer:", text)
	info, _ := sessions.Info("demo")
	fmt.Println("turns:", info.Turns, "messages:", info.Messages)
	stop()
	<-done
}
