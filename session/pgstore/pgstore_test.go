package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agcore/agrun/internal/testing/pgtest"
	"github.com/agcore/agrun/internal/testing/require"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/session/pgstore"
	"github.com/agcore/agrun/session/sessiontest"
)

// TestMain runs every test on one PostgreSQL server, a database each
// (pgtest.Main): a server per test cost 2 s of initdb and start-up each,
// most of the package's minute.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func openPG(t *testing.T, dsn string) *pgstore.Sessions {
	t.Helper()
	s, err := pgstore.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestSessions runs the session store suite against a real PostgreSQL
// server (internal/testing/pgtest), a new database per subtest.
func TestSessions(t *testing.T) {
	sessiontest.Run(t, func(t *testing.T) session.Store { return openPG(t, pgtest.Start(t)) }, sessiontest.Options{Verbatim: true})
}

// TestSessionsAdmin runs the Admin contract (`agrun sessions
// rm/prune/compact/export` on a cluster) against a real PostgreSQL
// server, a session in use through session.Guarded as a cluster has it.
func TestSessionsAdmin(t *testing.T) {
	sessiontest.RunAdmin(t, func(t *testing.T) session.Admin { return openPG(t, pgtest.Start(t)) }, sessiontest.AdminOptions{})
}

// TestSessionsTwoProcesses: stores with pools of their own on one
// database (as two worker processes have) race to append at the same
// seqs; exactly one wins each, the others see written false, and every
// store reads the winner's records.
func TestSessionsTwoProcesses(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t)
	stores := []*pgstore.Sessions{openPG(t, dsn), openPG(t, dsn), openPG(t, dsn)}
	for seq := int64(0); seq < 20; seq++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []string
		start := make(chan struct{})
		for i, s := range stores {
			for g := range 3 {
				who := fmt.Sprintf("store%d-g%d", i, g)
				wg.Go(func() {
					<-start
					w, err := s.Append(ctx, "shared", seq, []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"by":%q}`, who))})
					if err != nil {
						t.Errorf("seq %d %s: %v", seq, who, err)
					}
					if w {
						mu.Lock()
						winners = append(winners, who)
						mu.Unlock()
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("seq %d: winners %q, want exactly one", seq, winners)
		}
		want := fmt.Sprintf(`{"by":%q}`, winners[0])
		for i, s := range stores {
			got, err := s.Load(ctx, "shared", seq)
			if err != nil || len(got) != 1 || string(got[0]) != want {
				t.Fatalf("store %d reads seq %d as %q, %v; want %s", i, seq, got, err, want)
			}
		}
	}
}

// TestPGMigrations: many stores opening one new database at once apply
// the migrations once (the advisory lock), record them in
// schema_migrations, and a store opened later applies nothing.
func TestPGMigrations(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			s, err := pgstore.New(ctx, dsn)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	openPG(t, dsn)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT version, name FROM schema_migrations ORDER BY version`)
	type row struct {
		Version int64
		Name    string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != (row{1, "0001_session_events.sql"}) {
		t.Errorf("schema_migrations = %+v, want version 1 once", got)
	}
	// The data column is bytea: the bytes are kept, not re-encoded.
	var typ string
	if err := conn.QueryRow(ctx, `SELECT data_type FROM information_schema.columns WHERE table_name = 'session_events' AND column_name = 'data'`).Scan(&typ); err != nil {
		t.Fatal(err)
	}
	if typ != "bytea" {
		t.Errorf("session_events.data is %s, want bytea", typ)
	}
}

// TestSessionsErrors: a server that is not there fails at open with
// the cause, and a bad DSN names the problem without the password.
func TestSessionsErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pgstore.New(ctx, "postgres://u:secretpw@127.0.0.1:1/db?sslmode=disable&connect_timeout=5")
	if err == nil {
		t.Fatal("New to a closed port succeeded")
	}
	if s := err.Error(); strings.Contains(s, "secretpw") {
		t.Errorf("error shows the password: %s", s)
	}
	_, err = pgstore.New(ctx, "postgres://u:secretpw@127.0.0.1:notaport/db")
	if err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("bad DSN: %v", err)
	}
	// A cancelled context aborts an Append on an open store.
	s := openPG(t, pgtest.Start(t))
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := s.Append(cctx, "s", 0, []json.RawMessage{json.RawMessage(`{}`)}); !errors.Is(err, context.Canceled) {
		t.Errorf("Append with a cancelled context: %v", err)
	}
}

// TestExample runs Example (the package's documentation) against a real
// PostgreSQL server and checks what it prints.
func TestExample(t *testing.T) {
	t.Setenv("AGRUN_EXAMPLE_DSN", pgtest.Start(t))
	require.Stdout(t, Example, "user: hello\nassistant: hi there\n")
}

// TestNotifyListen: a listener gets the payloads sent for its session,
// in order, and none of another session's; a payload over
// MaxNotifyPayload is refused; the channel closes when ctx ends.
func TestNotifyListen(t *testing.T) {
	s := openPG(t, pgtest.Start(t))
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Listen(ctx, "a-session")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ id, text string }{{"a-session", "one"}, {"other", "not mine"}, {"a-session", "two"}} {
		if err := s.Notify(ctx, p.id, []byte(p.text)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"one", "two"} {
		select {
		case got := <-ch:
			if string(got) != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %q", want)
		}
	}
	if err := s.Notify(ctx, "a-session", make([]byte, pgstore.MaxNotifyPayload+1)); err == nil {
		t.Fatal("an oversized payload was sent")
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("a payload after the end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the channel stayed open after ctx ended")
	}
}
