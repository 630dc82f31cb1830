package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
)

// A conversation kept the CLI's way: records appended through the Store
// interface land in the JSON-lines files `agrun sessions show` reads.
// session.Mem and session/pgstore take the same calls.
func ExampleFiles() {
	dir, _ := os.MkdirTemp("", "sessions")
	defer os.RemoveAll(dir)
	files, err := session.OpenFiles(dir)
	if err != nil {
		log.Fatal(err)
	}
	var st session.Store = files
	var codec session.Codec
	ctx := context.Background()
	prompt, _ := codec.Message(loop.Message{Role: loop.RoleUser, Content: "hello"})
	reply, _ := codec.Message(loop.Message{Role: loop.RoleAssistant, Content: "hi there"})
	written, err := st.Append(ctx, "demo", 0, []json.RawMessage{prompt, reply})
	fmt.Println("written:", written, err)
	// A retried step appending at the same seq finds the records there.
	again, _ := st.Append(ctx, "demo", 0, []json.RawMessage{prompt})
	fmt.Println("written again:", again)

	recs, _ := st.Load(ctx, "demo", 0)
	history, _ := codec.History(recs)
	for _, m := range history {
		fmt.Printf("%s: %s\n", m.Role, m.Content)
	}
	info, _ := files.Info("demo")
	fmt.Println("turns:", info.Turns, "first prompt:", info.FirstPrompt)
	// Output:
	// written: true <nil>
	// written again: false
	// user: hello
	// assistant: hi there
	// turns: 1 first prompt: hello
}
