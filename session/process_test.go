package session_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/session"
)

// These tests run the session writer in child processes (the test binary
// re-executed with SESSION_CHILD set), to kill it at any moment and to
// hold a lock in another process. They were in the hostile suite; they
// live here because the session package is cmd/agrun's own.

const childEnv = "SESSION_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "session-writer" {
		if _, err := sessionWriter(); err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The session writer child appends messages of growing size to session
// HOSTILE_SESSION in store HOSTILE_STORE and prints "ACK n" after each
// Append returned (the message is on disk), until it is killed. With
// HOSTILE_HOLD=1 it only opens the session, prints "HELD" and waits.
func sessionWriter() (string, error) {
	st, err := session.OpenFiles(os.Getenv("HOSTILE_STORE"))
	if err != nil {
		return "", err
	}
	s, _, _, err := st.Open(os.Getenv("HOSTILE_SESSION"))
	if err != nil {
		return "", err
	}
	if os.Getenv("HOSTILE_HOLD") == "1" {
		fmt.Println("HELD")
		time.Sleep(time.Hour)
	}
	for i := 1; ; i++ {
		msg, _ := json.Marshal(map[string]any{"role": "tool", "content": strings.Repeat("x", i*997%(256<<10)), "n": i})
		if err := s.Append(msg); err != nil {
			return "", err
		}
		fmt.Printf("ACK %d\n", i)
	}
}

// startWriter starts the session writer and returns it with a channel of
// its stdout lines.
func startWriter(t *testing.T, store, id string, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"=session-writer", "HOSTILE_STORE="+store, "HOSTILE_SESSION="+id), env...)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	lines := make(chan string, 1<<16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, lines
}

// TestSessionSIGKILLDuringWrites kills a writer at several moments in the
// middle of its appends; every time the session opens again (the lock died
// with the writer), nothing acknowledged is lost, and every message is
// whole JSON.
func TestSessionSIGKILLDuringWrites(t *testing.T) {
	store := t.TempDir()
	for round, wait := range []int{1, 7, 40, 150, 400} {
		id := fmt.Sprintf("kill-%d", round)
		cmd, lines := startWriter(t, store, id)
		acked := 0
		for l := range lines {
			if n, ok := strings.CutPrefix(l, "ACK "); ok {
				acked, _ = strconv.Atoi(n)
				if acked >= wait {
					break
				}
			}
		}
		must(t, cmd.Process.Signal(syscall.SIGKILL))
		cmd.Wait()
		for l := range lines { // acknowledgements written before the kill landed
			if n, ok := strings.CutPrefix(l, "ACK "); ok {
				acked, _ = strconv.Atoi(n)
			}
		}
		st, err := session.OpenFiles(store)
		must(t, err)
		s, history, warnings, err := st.Open(id)
		if err != nil {
			t.Fatalf("round %d: reopening after SIGKILL: %v", round, err)
		}
		if len(history) < acked {
			t.Errorf("round %d: %d messages on disk, %d acknowledged", round, len(history), acked)
		}
		for i, m := range history {
			var v struct{ N int }
			if err := json.Unmarshal(m, &v); err != nil || v.N != i+1 {
				t.Errorf("round %d: message %d is %q (%v)", round, i, textsafe.Truncate(string(m), 80), err)
				break
			}
		}
		t.Logf("round %d: killed after %d acks; %d on disk; warnings %v", round, acked, len(history), warnings)
		must(t, s.Append(json.RawMessage(`{"role":"user","content":"after the kill"}`)))
		must(t, s.Close())
		if again, _, err := st.Messages(id); err != nil || len(again) != len(history)+1 {
			t.Errorf("round %d: after repair and append: %d messages, %v", round, len(again), err)
		}
	}
}

// TestSessionTwoProcesses: while one process holds a session, another
// cannot open it (ErrLocked), nor append to it; once the holder is killed,
// it can.
func TestSessionTwoProcesses(t *testing.T) {
	store := t.TempDir()
	cmd, lines := startWriter(t, store, "shared", "HOSTILE_HOLD=1")
	if l := <-lines; l != "HELD" {
		t.Fatalf("holder said %q", l)
	}
	st, err := session.OpenFiles(store)
	must(t, err)
	if _, _, _, err := st.Open("shared"); !errors.Is(err, session.ErrLocked) {
		t.Fatalf("second Open: %v; want ErrLocked", err)
	}
	// A second writer process gives up the same way.
	second := exec.Command(os.Args[0], "-test.run=^$")
	second.Env = append(os.Environ(), childEnv+"=session-writer", "HOSTILE_STORE="+store, "HOSTILE_SESSION=shared")
	out, err := second.Output()
	if err == nil || !strings.Contains(string(out), "locked") {
		t.Errorf("second writer process: %q (%v); want a lock error", out, err)
	}
	must(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	s, _, _, err := st.Open("shared")
	if err != nil {
		t.Fatalf("Open after the holder died: %v", err)
	}
	s.Close()
	for _, bad := range []string{"../escape", "/etc/passwd", ".hidden", "a/b", strings.Repeat("a", 65), "x\x00y"} {
		if _, _, _, err := st.Open(bad); !errors.Is(err, session.ErrBadID) {
			t.Errorf("Open(%q): %v; want ErrBadID", bad, err)
		}
	}
}
