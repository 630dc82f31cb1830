// Package session stores conversations so that they are never lost: each
// session is an append-only JSON-lines file, one message per line, written
// and fsynced as each message completes, mode 0600.
//
// Killing the process at any instant leaves a file that loads: a torn last
// line (a write cut short) is dropped with a warning, and nothing before it
// is lost. A session in use by one process is locked (flock) against every
// other process; the lock dies with its holder, so a killed process never
// leaves a session locked.
//
//	st, _ := session.OpenStore(session.DefaultDir())
//	s, history, warnings, err := st.Open("my-session") // creates it if new
//	defer s.Close()
//	s.Append(json.RawMessage(`{"role":"user","content":"hi"}`))
package session

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrLocked is returned by Open when another process holds the session.
var ErrLocked = errors.New("session locked: it is in use by another agrun process")

// ErrNotFound is returned by Load for an unknown session id.
var ErrNotFound = errors.New("session not found")

// ErrBadID is returned for ids that are not ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$.
var ErrBadID = errors.New("invalid session id (letters, digits, '_', '.', '-'; at most 64; not starting with '.' or '-')")

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidID reports whether id may name a session.
func ValidID(id string) bool { return idRE.MatchString(id) }

// NewID returns a fresh session id: the UTC time and 4 random bytes.
func NewID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// DefaultDir is $XDG_DATA_HOME/agrun/sessions, else
// ~/.local/share/agrun/sessions.
func DefaultDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "agrun", "sessions")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "agrun", "sessions")
	}
	return filepath.Join(os.TempDir(), "agrun-sessions")
}

// record is one line of a session file.
type record struct {
	Time    time.Time       `json:"time"`
	Message json.RawMessage `json:"message"`
}

// Store is a folder of sessions. It is safe for concurrent use.
type Store struct {
	dir string
}

// OpenStore returns the store in dir, creating the folder (0700).
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Dir returns the store's folder.
func (st *Store) Dir() string { return st.dir }

func (st *Store) path(id string) string { return filepath.Join(st.dir, id+".jsonl") }

// Session is one open, locked session. Append and Close are not safe for
// concurrent use; one goroutine should own a Session.
type Session struct {
	ID string
	f  *os.File
}

// Open opens session id for appending, creating it if it does not exist,
// and returns the messages it already holds. It fails with ErrLocked if
// another process has it open. Warnings describe data that was dropped (a
// torn last line) and repaired.
func (st *Store) Open(id string) (s *Session, history []json.RawMessage, warnings []string, err error) {
	if !ValidID(id) {
		return nil, nil, nil, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	f, err := os.OpenFile(st.path(id), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("session %q: %w", id, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil, nil, fmt.Errorf("session %q: %w", id, ErrLocked)
		}
		return nil, nil, nil, fmt.Errorf("session %q: lock: %w", id, err)
	}
	history, good, warnings, err := read(f)
	if err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("session %q: %w", id, err)
	}
	// Cut a torn tail so the next line starts on a clean line.
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("session %q: repair: %w", id, err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("session %q: %w", id, err)
	}
	return &Session{ID: id, f: f}, history, warnings, nil
}

// Append writes msg (one JSON value) as a new line and syncs it to disk
// before returning.
func (s *Session) Append(msg json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, msg); err != nil {
		return fmt.Errorf("session %q: message is not JSON: %w", s.ID, err)
	}
	line, err := json.Marshal(record{Time: time.Now().UTC(), Message: buf.Bytes()})
	if err != nil {
		return fmt.Errorf("session %q: %w", s.ID, err)
	}
	line = append(line, '\n')
	if _, err := s.f.Write(line); err != nil {
		return fmt.Errorf("session %q: write: %w", s.ID, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("session %q: sync: %w", s.ID, err)
	}
	return nil
}

// Close releases the session's lock.
func (s *Session) Close() error { return s.f.Close() }

// Load returns the messages of session id without locking it.
func (st *Store) Load(id string) ([]json.RawMessage, []string, error) {
	if !ValidID(id) {
		return nil, nil, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	f, err := os.Open(st.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("session %q: %w", id, err)
	}
	defer f.Close()
	msgs, _, warnings, err := read(f)
	return msgs, warnings, err
}

// maxLine bounds one message line (a tool result can be large, but not
// unbounded).
const maxLine = 64 << 20

// read returns every message of the file, the offset just past the last
// good line, and warnings for lines it dropped.
func read(f *os.File) (msgs []json.RawMessage, good int64, warnings []string, err error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, nil, err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var off int64
	for n := 1; ; n++ {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it.
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(full) < maxLine {
				line, err = r.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		}
		if err == io.EOF {
			if len(line) > 0 {
				warnings = append(warnings, fmt.Sprintf("line %d: torn last line (%d bytes) dropped: the process stopped while writing it", n, len(line)))
			}
			return msgs, good, warnings, nil
		}
		if err != nil {
			return nil, 0, nil, err
		}
		off += int64(len(line))
		var rec record
		if jerr := json.Unmarshal(line, &rec); jerr != nil || len(rec.Message) == 0 {
			warnings = append(warnings, fmt.Sprintf("line %d: unreadable line dropped", n))
			good = off
			continue
		}
		msgs = append(msgs, rec.Message)
		good = off
	}
}

// Info summarises a stored session.
type Info struct {
	ID          string    `json:"id"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	FirstPrompt string    `json:"first_prompt"`
	Turns       int       `json:"turns"`    // assistant messages
	Messages    int       `json:"messages"` // all messages
}

// List returns every session in the store, newest first.
func (st *Store) List() ([]Info, error) {
	ents, err := os.ReadDir(st.dir)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	var out []Info
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !ValidID(id) || e.IsDir() {
			continue
		}
		info, err := st.Info(id)
		if err != nil {
			continue
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b Info) int { return b.Updated.Compare(a.Updated) })
	return out, nil
}

// Info summarises session id.
func (st *Store) Info(id string) (Info, error) {
	f, err := os.Open(st.path(id))
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	info := Info{ID: id, Updated: fi.ModTime()}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var rec record
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		if info.Messages == 0 {
			info.Created = rec.Time
		}
		info.Messages++
		var m struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		}
		_ = json.Unmarshal(rec.Message, &m)
		switch m.Role {
		case "assistant":
			info.Turns++
		case "user":
			if s, ok := m.Content.(string); ok && info.FirstPrompt == "" {
				info.FirstPrompt = s
			}
		}
	}
	if info.Created.IsZero() {
		info.Created = fi.ModTime()
	}
	return info, nil
}
