package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/session/pgstore"
)

// Sessions in PostgreSQL: the connection string is the app's (here from
// AGRUN_EXAMPLE_DSN). The store creates its table on first use (embedded
// migrations, under an advisory lock), and any number of processes may
// share it. TestExample runs this against a real server.
func Example() {
	ctx := context.Background()
	st, err := pgstore.New(ctx, os.Getenv("AGRUN_EXAMPLE_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	var codec session.Codec
	prompt, _ := codec.Message(loop.Message{Role: loop.RoleUser, Content: "hello"})
	reply, _ := codec.Message(loop.Message{Role: loop.RoleAssistant, Content: "hi there"})
	if _, err := st.Append(ctx, "demo", 0, []json.RawMessage{prompt, reply}); err != nil {
		log.Fatal(err)
	}
	recs, err := st.Load(ctx, "demo", 0)
	if err != nil {
		log.Fatal(err)
	}
	history, _ := codec.History(recs)
	for _, m := range history {
		fmt.Printf("%s: %s\n", m.Role, m.Content)
	}
}
