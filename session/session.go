// Package session stores conversations so that they are never lost: each
// session is an append-only JSON-lines file, one record per line, written
// and fsynced as each record completes, mode 0600.
//
// A record is a message of the conversation, {"time":...,"message":{...}}
// (Append, Record); what one model request cost,
// {"time":...,"request":{...}} (RecordRequest: the model, the usage, the
// duration); what one tool call did, {"time":...,"call":{...}}
// (RecordCall: the tool, the call id, the duration, the error kind and
// the host's audit, for `agrun audit`); or an approval decision about a
// tool call, {"time":...,"decision":{...}} (RecordDecision). History
// readers (Open, Messages, Decode) return only the messages; Info sums the
// requests; Records returns them all.
//
// Killing the process at any instant leaves a file that loads: a torn last
// line (a write cut short) is dropped with a warning, and nothing before it
// is lost. No line can make a session unreadable: a line that is not a
// record is dropped with a warning, and a line over 64 MiB (which Append
// never writes) is read as it streams by, never held whole, and kept with
// every string longer than 128 KiB cut, with a warning; the lines after it
// load as usual. A session in use by one process is locked (flock) against every
// other process; the lock dies with its holder, so a killed process never
// leaves a session locked.
//
//	st, _ := session.OpenFiles(session.DefaultDir())
//	s, history, warnings, err := st.Open("my-session") // creates it if new
//	defer s.Close()
//	s.Append(json.RawMessage(`{"role":"user","content":"hi"}`))
//
// Files is also a Store (store.go): the interface a cluster's steps and
// an embedder's app write through, with Mem and session/pgstore beside it.
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
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/registry"
)

// ErrLocked is returned by Open when another process holds the session.
var ErrLocked = errors.New("session locked: it is in use by another agrun process")

// ErrNotFound is returned by Messages, Load, Info and Records for an unknown session id.
var ErrNotFound = errors.New("session not found")

// ErrTooLarge is returned (wrapped) by Append for a message that cannot be
// stored within the line limit even with its long strings cut.
var ErrTooLarge = errors.New("message too large for a session line")

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

// Record is one line of a session file: a message of the conversation, a
// model request's summary, a tool call's outcome and audit, or an
// approval decision (exactly one of Message, Request, Call and Decision
// is set).
type Record struct {
	Time    time.Time       `json:"time"`
	Message json.RawMessage `json:"message,omitempty"`
	Request json.RawMessage `json:"request,omitempty"`
	Call    json.RawMessage `json:"call,omitempty"`
	// Decision is an approval decision (RecordDecision).
	Decision json.RawMessage `json:"decision,omitempty"`
}

// Call is what a call record holds: one tool call of a run, as the loop
// reported it when the call completed (loop.ToolExecutionCompleted). It
// never holds the call's arguments or result (they are in the messages).
type Call struct {
	Tool       string `json:"tool"`
	ID         string `json:"id"`
	DurationMS int64  `json:"duration_ms"`
	// ErrorKind is the registry's kind of a failed call, "" on success.
	ErrorKind registry.Kind `json:"error_kind,omitempty"`
	// Audit is what the call did as its host saw it (nil: none reported,
	// or the call did not run).
	Audit *registry.Audit `json:"audit,omitempty"`
	// Tenant is the agrun serve tenant whose run made the call ("": not
	// a serve run, or one recorded before tenants were named).
	Tenant string `json:"tenant,omitempty"`
}

// CallOf is the call record of a completed tool call.
func CallOf(ev *loop.ToolExecutionCompleted) Call {
	return Call{Tool: ev.Name, ID: ev.ID, DurationMS: ev.Duration.Milliseconds(), ErrorKind: ev.ErrorKind, Audit: ev.Audit}
}

// DecodeCall returns the call r holds; ok is false when r is not a call
// record or its call does not decode (a reader skips it).
func (r *Record) DecodeCall() (c Call, ok bool) {
	if len(r.Call) == 0 || json.Unmarshal(r.Call, &c) != nil {
		return Call{}, false
	}
	return c, true
}

// record is the package's name for Record.
type record = Record

// valid reports whether r is a record a reader keeps.
func (r *Record) valid() bool {
	return len(r.Message) != 0 || len(r.Request) != 0 || len(r.Call) != 0 || len(r.Decision) != 0
}

// Files is a folder of sessions. It is safe for concurrent use.
type Files struct {
	dir string
}

// OpenFiles returns the store in dir, creating the folder (0700).
func OpenFiles(dir string) (*Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	return &Files{dir: dir}, nil
}

// Dir returns the store's folder.
func (st *Files) Dir() string { return st.dir }

func (st *Files) path(id string) string { return filepath.Join(st.dir, id+".jsonl") }

// Session is one open, locked session. Append, Record and Close are not
// safe for concurrent use; one goroutine should own a Session. Err may be
// called from any goroutine.
type Session struct {
	ID string
	f  *os.File

	mu        sync.Mutex
	recordErr error // the first failure of Record
}

// Open opens session id for appending, creating it if it does not exist,
// and returns the messages it already holds. It fails with ErrLocked if
// another process has it open. Warnings describe data that was dropped (a
// torn last line) and repaired.
func (st *Files) Open(id string) (s *Session, history []json.RawMessage, warnings []string, err error) {
	if !ValidID(id) {
		return nil, nil, nil, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	var f *os.File
	for try := 0; ; try++ {
		if f, err = os.OpenFile(st.path(id), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
			return nil, nil, nil, fmt.Errorf("session %q: %w", id, err)
		}
		// Between our open and our lock, the process that held the lock
		// may have removed the file (Remove) or replaced it (Rewrite):
		// then this lock is on a file no one will read; open the path
		// again.
		err = lockCurrent(f, st.path(id))
		if err == nil {
			break
		}
		f.Close()
		if !errors.Is(err, errReplaced) || try == 10 {
			return nil, nil, nil, fmt.Errorf("session %q: %w", id, err)
		}
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
// before returning. A line longer than the reader's limit (64 MiB) is
// written with every string in msg longer than 128 KiB cut (ending in
// "…"), as the reader would cut it; if it is still too long, nothing is
// written and the error wraps ErrTooLarge: the session stays readable and
// later messages can still be appended.
func (s *Session) Append(msg json.RawMessage) error {
	return s.append("message", msg)
}

// append writes one record of the given kind ("message", "request" or
// "call").
func (s *Session) append(kind string, v json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return fmt.Errorf("session %q: %s is not JSON: %w", s.ID, kind, err)
	}
	rec := record{Time: time.Now().UTC()}
	switch kind {
	case "request":
		rec.Request = buf.Bytes()
	case "call":
		rec.Call = buf.Bytes()
	case "decision":
		rec.Decision = buf.Bytes()
	default:
		rec.Message = buf.Bytes()
	}
	line, err := s.line(rec)
	if err != nil {
		return err
	}
	return s.write(line)
}

// line encodes rec as one session line, cut as the reader would cut it.
func (s *Session) line(rec Record) ([]byte, error) {
	line, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("session %q: %w", s.ID, err)
	}
	line = append(line, '\n')
	if len(line) > maxLine {
		// Never write what the reader would have to cut: cut it here,
		// the same way, or refuse it (the file stays as it was).
		short, ok := shrink(line)
		if !ok {
			return nil, fmt.Errorf("session %q: %w: %d bytes", s.ID, ErrTooLarge, len(line))
		}
		line = short
	}
	return line, nil
}

// write appends lines to the file and syncs it.
func (s *Session) write(lines []byte) error {
	if _, err := s.f.Write(lines); err != nil {
		return fmt.Errorf("session %q: write: %w", s.ID, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("session %q: sync: %w", s.ID, err)
	}
	return nil
}

// AppendRecords appends recs as they are (their times kept), in one write
// and one fsync: a step of a cluster run (package cluster) stores its
// records this way. A record with no part set, or one that is not JSON,
// is refused and nothing is written.
func (s *Session) AppendRecords(recs []Record) error {
	var all []byte
	for i, rec := range recs {
		parts := 0
		for _, p := range []*json.RawMessage{&rec.Message, &rec.Request, &rec.Call, &rec.Decision} {
			if len(*p) == 0 {
				continue
			}
			parts++
			var buf bytes.Buffer
			if err := json.Compact(&buf, *p); err != nil {
				return fmt.Errorf("session %q: record %d is not JSON: %w", s.ID, i, err)
			}
			*p = buf.Bytes()
		}
		if parts != 1 {
			return fmt.Errorf("session %q: record %d must hold exactly one of message, request, call, decision", s.ID, i)
		}
		line, err := s.line(rec)
		if err != nil {
			return err
		}
		all = append(all, line...)
	}
	if len(all) == 0 {
		return nil
	}
	return s.write(all)
}

// Record appends msg, encoded as JSON, like Append. It is made to be a
// model loop's OnMessage, which cannot fail: a failure does not stop the
// later messages from being tried, and the first one is kept for Err.
func (s *Session) Record(msg any) { s.record("message", msg) }

// RecordRequest appends v, encoded as JSON, as a request record: what one
// model request cost (for the CLI, a loop.RequestInfo: "model", "usage",
// "duration_ms", "retries", "finish_reason"). It handles errors as Record
// does. History readers skip request records; Info sums them.
func (s *Session) RecordRequest(v any) { s.record("request", v) }

// RecordCall appends c as a call record: what one tool call did (see
// Call). It handles errors as Record does. History readers skip call
// records; Store.Calls and Records return them.
func (s *Session) RecordCall(c Call) { s.record("call", c) }

// RecordDecision appends v, encoded as JSON, as a decision record: who
// decided what about a tool call, when, with which grant in view (for the
// CLI, a loop.DecisionRecord). It handles errors as Record does. History
// readers skip decision records; Records returns them.
func (s *Session) RecordDecision(v any) { s.record("decision", v) }

func (s *Session) record(kind string, v any) {
	b, err := json.Marshal(v)
	if err == nil {
		err = s.append(kind, b)
	}
	if err != nil {
		s.mu.Lock()
		if s.recordErr == nil {
			s.recordErr = fmt.Errorf("the session could not be saved: %w", err)
		}
		s.mu.Unlock()
	}
}

// Err returns the first failure of Record (wrapping the cause), or nil if
// every recorded message is on disk.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recordErr
}

// A MessageError is returned by Decode for a stored message that does not
// decode into the caller's type.
type MessageError struct {
	Index int // 1-based position in the history
	Err   error
}

// Error says which message did not decode, and why.
func (e *MessageError) Error() string { return fmt.Sprintf("message %d: %v", e.Index, e.Err) }

// Unwrap returns the decoding error.
func (e *MessageError) Unwrap() error { return e.Err }

// Decode decodes the messages Open or Messages returned into T (for the CLI,
// loop.Message). The first one that does not decode fails it with a
// *MessageError.
func Decode[T any](history []json.RawMessage) ([]T, error) {
	out := make([]T, 0, len(history))
	for i, raw := range history {
		var m T
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, &MessageError{Index: i + 1, Err: err}
		}
		out = append(out, m)
	}
	return out, nil
}

// Close releases the session's lock.
func (s *Session) Close() error { return s.f.Close() }

// Messages returns the messages of session id without locking it.
func (st *Files) Messages(id string) ([]json.RawMessage, []string, error) {
	f, err := st.openRead(id)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	msgs, _, warnings, err := read(f)
	return msgs, warnings, err
}

// maxLine bounds one message line as it is read and written; a longer
// line is kept with its long strings cut (shrink). A variable so that tests
// can lower it.
var maxLine = 64 << 20

// maxString is the longest string a line over maxLine keeps (the loop's
// tool messages are far shorter; only the whole copy it keeps of a cut
// result, full_content, can be this long). A variable so that tests can
// lower it.
var maxString = 128 << 10

// read returns every message of the file, the offset just past the last
// good line, and warnings for lines it dropped or cut.
func read(f *os.File) (msgs []json.RawMessage, good int64, warnings []string, err error) {
	recs, good, warnings, err := readRecords(f)
	for _, r := range recs {
		if len(r.Message) != 0 {
			msgs = append(msgs, r.Message)
		}
	}
	return msgs, good, warnings, err
}

// readRecords reads the file from the start, one record a line. A line
// that is not a record is dropped with a warning; a line over maxLine is
// read through shrink, never held whole, and kept (with a warning) if what
// remains is a record; a torn last line (no newline) is dropped. A bad line
// never stops the reading: only an I/O error does.
func readRecords(f *os.File) (recs []record, good int64, warnings []string, err error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, nil, err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var off int64
	for n := 1; ; n++ {
		line, err := r.ReadSlice('\n')
		var sh *shrinker
		size := int64(len(line))
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it, up to maxLine; beyond, shrink it
			// as it streams by.
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				size += int64(len(line))
				if sh != nil {
					sh.feed(line)
					continue
				}
				full = append(full, line...)
				if len(full) > maxLine {
					sh = newShrinker()
					sh.feed(full)
					full = nil
				}
			}
			line = full
			if sh != nil {
				line = sh.out
			}
		}
		if err == io.EOF {
			if size > 0 {
				warnings = append(warnings, fmt.Sprintf("line %d: torn last line (%d bytes) dropped: the process stopped while writing it", n, size))
			}
			return recs, good, warnings, nil
		}
		if err != nil {
			return nil, 0, nil, err
		}
		off += size
		good = off
		var rec record
		if sh != nil && sh.tooLong {
			warnings = append(warnings, fmt.Sprintf("line %d: %d bytes, over the %d MiB line limit even with its strings cut: dropped", n, size, maxLine>>20))
			continue
		}
		if jerr := json.Unmarshal(line, &rec); jerr != nil || !rec.valid() {
			warnings = append(warnings, fmt.Sprintf("line %d: unreadable line dropped", n))
			continue
		}
		if sh != nil && sh.cut {
			warnings = append(warnings, fmt.Sprintf("line %d: %d bytes, over the %d MiB line limit: kept with every string longer than %d KiB cut", n, size, maxLine>>20, maxString>>10))
		}
		recs = append(recs, rec)
	}
}

// shrink returns line (one record and its newline) with every JSON string
// longer than maxString cut, and whether the result is a record within
// maxLine.
func shrink(line []byte) ([]byte, bool) {
	sh := newShrinker()
	sh.feed(line)
	var rec record
	if sh.tooLong || json.Unmarshal(sh.out, &rec) != nil || !rec.valid() {
		return nil, false
	}
	return sh.out, true
}

// shrinker copies a JSON text fed to it in pieces, cutting every string
// longer than maxString bytes (as written, escapes included) at an escape
// and rune boundary and ending it in "…". Its output is valid JSON if its
// input was; it stops growing (tooLong) past maxLine bytes. It keeps no
// more than its output, so a line of any length can stream through it.
type shrinker struct {
	out     []byte
	inStr   bool
	esc     int // 0: none; -1: after a backslash; n > 0: hex digits left
	strLen  int // bytes of the current string copied
	cutting bool
	cut     bool // some string was cut
	tooLong bool
}

func newShrinker() *shrinker { return &shrinker{out: make([]byte, 0, 1<<20)} }

func (s *shrinker) feed(p []byte) {
	for _, c := range p {
		if s.tooLong {
			return
		}
		if !s.inStr {
			s.emit(c)
			if c == '"' {
				s.inStr, s.strLen, s.cutting = true, 0, false
			}
			continue
		}
		if c == '"' && s.esc == 0 {
			if s.cutting {
				s.emit([]byte("…")...)
			}
			s.emit(c)
			s.inStr = false
			continue
		}
		if !s.cutting && s.strLen >= maxString && s.esc == 0 && (c < 0x80 || c >= 0xc0) {
			s.cutting, s.cut = true, true
		}
		switch {
		case s.esc == -1 && c == 'u':
			s.esc = 4
		case s.esc == -1:
			s.esc = 0
		case s.esc > 0:
			s.esc--
		case c == '\\':
			s.esc = -1
		}
		if !s.cutting {
			s.emit(c)
			s.strLen++
		}
	}
}

func (s *shrinker) emit(b ...byte) {
	s.out = append(s.out, b...)
	if len(s.out) > maxLine {
		s.tooLong = true
		s.out = nil
	}
}

// Info summarises a stored session.
type Info struct {
	ID          string    `json:"id"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"` // last used: the file's modification time
	FirstPrompt string    `json:"first_prompt"`
	// Turns is the number of user prompts (the user messages).
	Turns    int `json:"turns"`
	Messages int `json:"messages"` // all messages
	// Model is the "model" of the last request record ("" if none).
	Model string `json:"model"`
	// Tokens is the sum of the request records' usage.total_tokens.
	Tokens int64 `json:"tokens"`
}

// Infos returns every session in the store, most recently used first.
func (st *Files) Infos() ([]Info, error) {
	ents, err := os.ReadDir(st.dir)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
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
	SortInfos(out)
	return out, nil
}

// requestSummary is what Info reads of a request record; every field is
// optional and a record that does not decode is ignored.
type requestSummary struct {
	Model string `json:"model"`
	Usage struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
}

// Info summarises session id. An unknown id is an error matching
// ErrNotFound.
func (st *Files) Info(id string) (Info, error) {
	if !ValidID(id) {
		return Info{}, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	f, err := os.Open(st.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	recs, _, _, err := readRecords(f)
	if err != nil {
		return Info{}, err
	}
	info := InfoOf(id, recs)
	info.Updated = fi.ModTime()
	if info.Created.IsZero() {
		info.Created = fi.ModTime()
	}
	return info, nil
}

// InfoOf summarises the records of session id (as Records returns them,
// from this store or another: the cluster's); Updated is left zero.
func InfoOf(id string, recs []Record) Info {
	info := Info{ID: id}
	for _, rec := range recs {
		if info.Created.IsZero() {
			info.Created = rec.Time
		}
		if len(rec.Request) != 0 {
			var rq requestSummary
			if json.Unmarshal(rec.Request, &rq) == nil {
				if rq.Model != "" {
					info.Model = rq.Model
				}
				info.Tokens += rq.Usage.TotalTokens
			}
		}
		if len(rec.Message) == 0 {
			continue
		}
		info.Messages++
		var m struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		}
		_ = json.Unmarshal(rec.Message, &m)
		if m.Role == "user" {
			info.Turns++
			if s, ok := m.Content.(string); ok && info.FirstPrompt == "" {
				info.FirstPrompt = s
			}
		}
	}
	return info
}

// Records returns every record of session id, messages, requests and calls in
// file order, without locking it, and warnings for lines dropped or cut.
// An unknown id is an error matching ErrNotFound.
func (st *Files) Records(id string) ([]Record, []string, error) {
	f, err := st.openRead(id)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	recs, _, warnings, err := readRecords(f)
	if err != nil {
		return nil, nil, fmt.Errorf("session %q: %w", id, err)
	}
	return recs, warnings, nil
}

// openRead opens session id's file for reading.
func (st *Files) openRead(id string) (*os.File, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	f, err := os.Open(st.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("session %q: %w", id, err)
	}
	return f, nil
}

// Remove deletes session id. It fails with ErrLocked, and removes nothing,
// if a process has the session open; with ErrNotFound if there is no such
// session; with ErrBadID for an invalid id.
func (st *Files) Remove(id string) error {
	_, err := st.remove(id, time.Time{})
	return err
}

// RemoveUnusedSince removes session id if it was last used (its file
// changed) before cutoff, deciding under the session's lock, so that a
// session used since the caller listed it is kept. It reports whether it
// removed it; errors as Remove.
func (st *Files) RemoveUnusedSince(id string, cutoff time.Time) (bool, error) {
	return st.remove(id, cutoff)
}

// remove is Remove, and with a non-zero cutoff RemoveUnusedSince.
func (st *Files) remove(id string, cutoff time.Time) (bool, error) {
	if !ValidID(id) {
		return false, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	f, err := os.OpenFile(st.path(id), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("session %q: %w", id, err)
	}
	defer f.Close()
	if err := lockCurrent(f, st.path(id)); errors.Is(err, errReplaced) { // removed (and maybe re-created) meanwhile
		return false, fmt.Errorf("session %q: %w", id, ErrNotFound)
	} else if err != nil {
		return false, fmt.Errorf("session %q: %w", id, err)
	}
	if !cutoff.IsZero() {
		fi, err := f.Stat()
		if err != nil {
			return false, fmt.Errorf("session %q: %w", id, err)
		}
		if !fi.ModTime().Before(cutoff) {
			return false, nil // used since the caller looked
		}
	}
	if err := os.Remove(st.path(id)); err != nil {
		return false, fmt.Errorf("session %q: %w", id, err)
	}
	return true, nil
}

// Remove deletes the open session's file, then closes it: for a session
// that turned out to hold nothing worth keeping (a first request that
// failed). The lock is held until the file is gone, so no other process
// can have opened it meanwhile (Open checks that the file it locked is
// still the one at the path).
func (s *Session) Remove() error {
	err := os.Remove(s.f.Name())
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// CallAt is one call record of a stored session: when it was written
// (when the call completed) and what it holds.
type CallAt struct {
	Session string
	Time    time.Time
	Call
}

// Calls returns the call records of session id in file order (a record
// that does not decode is skipped), without locking it, and warnings for
// lines dropped or cut. An unknown id is an error matching ErrNotFound.
func (st *Files) Calls(id string) ([]CallAt, []string, error) {
	recs, warnings, err := st.Records(id)
	if err != nil {
		return nil, nil, err
	}
	var out []CallAt
	for i := range recs {
		if c, ok := recs[i].DecodeCall(); ok {
			out = append(out, CallAt{Session: id, Time: recs[i].Time, Call: c})
		}
	}
	return out, warnings, nil
}
