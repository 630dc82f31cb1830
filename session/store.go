package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/agcore/agrun/loop"
)

// A Store keeps each session's records — the JSON lines of a session
// file: a message, a request, a call, a decision (Record) — numbered from
// 0 in the order they were appended. Three implementations pass the one
// contract suite (session/sessiontest): Files (the JSON-lines files of
// the CLI, the default), Mem (in memory: tests and single-process apps)
// and session/pgstore (PostgreSQL, for a cluster). A Store is safe for
// concurrent use, by many processes for the persistent ones.
//
// Records are kept byte for byte as appended (Files re-encodes them as
// its lines, keeping their meaning); each must be valid JSON on one line,
// of at most MaxRecordBytes (ErrTooLarge). Session ids are ValidID
// (ErrBadID). CheckAppend is the common check.
//
// Appends are idempotent under retries: a step of a session workflow
// (package cluster) writes its records at the seq the workflow gave it,
// and a retried step whose first attempt already wrote them finds them
// there (first writer wins: Append reports written false, and the step
// returns what is stored instead of doing its work again).
type Store interface {
	// Append writes recs at seq, seq+1, ... as one batch. If the session
	// already holds a record at seq, nothing is written and written is
	// false. A seq past the session's next record is ErrSeqGap. A session
	// is created by its first Append (seq 0). An empty batch is an error.
	Append(ctx context.Context, session string, seq int64, recs []json.RawMessage) (written bool, err error)
	// Load returns the session's records from seq from on, in order:
	// ErrNotFound if the session has none; an empty slice if from is at
	// or past its end.
	Load(ctx context.Context, session string, from int64) ([]json.RawMessage, error)
	// List returns the ids of the sessions, sorted.
	List(ctx context.Context) ([]string, error)
	// Delete removes a session and its records (ErrNotFound if none).
	Delete(ctx context.Context, session string) error
}

// MaxRecordBytes caps one record appended through a Store (ErrTooLarge):
// the JSON of one message, request, call or decision.
const MaxRecordBytes = 64 << 20

// ErrSeqGap is returned (wrapped) by Store.Append for a batch that does
// not start at the session's next record or at one it holds.
var ErrSeqGap = errors.New("records out of sequence")

// CheckAppend is the validation every Store does before it writes
// anything: a ValidID (ErrBadID), a seq >= 0, a non-empty batch of
// records each of valid JSON on one line (no raw newline: a JSON-lines
// store keeps a record a line) within MaxRecordBytes (ErrTooLarge).
// Stores outside this package call it too, so that all refuse the same
// batches.
func CheckAppend(session string, seq int64, recs []json.RawMessage) error {
	if !ValidID(session) {
		return fmt.Errorf("session %q: %w", session, ErrBadID)
	}
	if seq < 0 {
		return fmt.Errorf("session %s: append at a negative seq %d", session, seq)
	}
	if len(recs) == 0 {
		return fmt.Errorf("session %s: append at %d: no records", session, seq)
	}
	for i, r := range recs {
		if len(r) > MaxRecordBytes {
			return fmt.Errorf("session %s: record %d is %d bytes, over %d: %w", session, seq+int64(i), len(r), MaxRecordBytes, ErrTooLarge)
		}
		if !json.Valid(r) {
			return fmt.Errorf("session %s: record %d is not valid JSON", session, seq+int64(i))
		}
		if bytes.ContainsAny(r, "\r\n") {
			return fmt.Errorf("session %s: record %d is not on one line", session, seq+int64(i))
		}
	}
	return nil
}

// CheckLoad validates Load's arguments.
func CheckLoad(session string, from int64) error {
	if !ValidID(session) {
		return fmt.Errorf("session %q: %w", session, ErrBadID)
	}
	if from < 0 {
		return fmt.Errorf("session %s: load from a negative seq %d", session, from)
	}
	return nil
}

// --- Files as a Store ---

// Append writes recs at seq (see Store), in one write and one fsync under
// the session's lock, waiting up to about 2 s for another process that
// holds the lock. Each record must be a Record (one of message, request,
// call, decision). A batch is atomic per line, not as a whole: a process
// killed in the middle of the write leaves the lines before the cut
// (PostgreSQL's store is atomic per batch).
func (st *Files) Append(ctx context.Context, id string, seq int64, recs []json.RawMessage) (bool, error) {
	if err := CheckAppend(id, seq, recs); err != nil {
		return false, err
	}
	rs := make([]Record, len(recs))
	for i, b := range recs {
		if err := json.Unmarshal(b, &rs[i]); err != nil {
			return false, fmt.Errorf("session %q: record %d: %w", id, seq+int64(i), err)
		}
	}
	if seq > 0 {
		// A batch past the start of a session that does not exist is
		// refused without creating it (Open would).
		if _, err := os.Stat(st.path(id)); errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("session %s has no records, not %d: %w", id, seq, ErrSeqGap)
		}
	}
	var s *Session
	var err error
	// Another process may hold the session for an instant (a reader
	// does not lock; a writer or a compaction does): wait for it up to
	// about 2 s. The lock is tried without blocking, so the retries are
	// kept close (at most 20 ms apart): with widely spaced ones, a holder
	// that takes the lock again and again (compactions one after another)
	// would be found holding it at each of the few tries, and the append
	// would fail although the lock was free most of the time.
	deadline := time.Now().Add(2 * time.Second)
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		s, _, _, err = st.Open(id)
		if !errors.Is(err, ErrLocked) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	if err != nil {
		return false, err
	}
	defer s.Close()
	have, _, err := st.Records(id)
	if err != nil {
		return false, err
	}
	switch n := int64(len(have)); {
	case seq < n:
		return false, nil
	case seq > n:
		return false, fmt.Errorf("session %s has %d records, not %d: %w", id, n, seq, ErrSeqGap)
	}
	if err := s.AppendRecords(rs); err != nil {
		return false, err
	}
	return true, nil
}

// Load returns the records of session id from seq from on, each as the
// JSON of a Record (see Store); lines a reader drops are not counted.
func (st *Files) Load(ctx context.Context, id string, from int64) ([]json.RawMessage, error) {
	if err := CheckLoad(id, from); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	recs, _, err := st.Records(id)
	if err != nil {
		return nil, err
	}
	from = min(from, int64(len(recs)))
	out := make([]json.RawMessage, 0, len(recs)-int(from))
	for _, r := range recs[from:] {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// List returns the ids of the sessions in the folder, sorted.
func (st *Files) List(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	infos, err := st.Infos()
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(infos))
	for i, in := range infos {
		ids[i] = in.ID
	}
	slices.Sort(ids)
	return ids, nil
}

// Delete removes session id, as Remove (ErrLocked while a process has it
// open).
func (st *Files) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return st.Remove(id)
}

var _ Store = (*Files)(nil)

// --- Mem ---

// Mem is a Store in memory, for tests and single-process apps: its
// sessions are gone when the process ends. It keeps the contract of the
// persistent stores exactly (session/sessiontest runs against it) and
// copies records in and out, so callers may reuse their buffers. The zero
// value is ready to use; it is safe for concurrent use.
type Mem struct {
	mu       sync.Mutex
	sessions map[string][]json.RawMessage
	updated  map[string]time.Time // each session's last append
}

// Append writes recs at seq, seq+1, ... (see Store).
func (m *Mem) Append(ctx context.Context, session string, seq int64, recs []json.RawMessage) (bool, error) {
	if err := CheckAppend(session, seq, recs); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	have := m.sessions[session]
	switch next := int64(len(have)); {
	case seq < next:
		return false, nil
	case seq > next:
		return false, fmt.Errorf("session %s: append at %d, next is %d: %w", session, seq, next, ErrSeqGap)
	}
	if m.sessions == nil {
		m.sessions = map[string][]json.RawMessage{}
		m.updated = map[string]time.Time{}
	}
	m.updated[session] = time.Now()
	for _, r := range recs {
		have = append(have, slices.Clone(r))
	}
	m.sessions[session] = have
	return true, nil
}

// Load returns copies of the session's records from seq from on.
func (m *Mem) Load(ctx context.Context, session string, from int64) ([]json.RawMessage, error) {
	if err := CheckLoad(session, from); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	have, ok := m.sessions[session]
	if !ok {
		return nil, fmt.Errorf("session %q: %w", session, ErrNotFound)
	}
	out := []json.RawMessage{}
	for i := from; i < int64(len(have)); i++ {
		out = append(out, slices.Clone(have[i]))
	}
	return out, nil
}

// List returns the ids of the sessions, sorted.
func (m *Mem) List(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.sessions))
	for id := range m.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// Delete removes a session (ErrNotFound if there is none).
func (m *Mem) Delete(ctx context.Context, session string) error {
	if !ValidID(session) {
		return fmt.Errorf("session %q: %w", session, ErrBadID)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[session]; !ok {
		return fmt.Errorf("session %q: %w", session, ErrNotFound)
	}
	delete(m.sessions, session)
	delete(m.updated, session)
	return nil
}

var _ Store = (*Mem)(nil)

// --- the records' formats ---

// Codec turns what a model loop produced into the records of a session
// file (Record's JSON) and records back into a history: package cluster
// stores its steps' records with it, so that a session run on a cluster
// reads like a local one (agrun sessions, agrun audit). The zero value is
// ready to use.
type Codec struct{}

func (Codec) record(set func(*Record, json.RawMessage), v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	r := Record{Time: time.Now().UTC()}
	set(&r, b)
	return json.Marshal(r)
}

// Message is the record of a message of the conversation.
func (c Codec) Message(m loop.Message) (json.RawMessage, error) {
	return c.record(func(r *Record, b json.RawMessage) { r.Message = b }, m)
}

// Request is the record of one model request.
func (c Codec) Request(ri loop.RequestInfo) (json.RawMessage, error) {
	return c.record(func(r *Record, b json.RawMessage) { r.Request = b }, ri)
}

// Call is the record of a completed tool call (CallOf).
func (c Codec) Call(ev *loop.ToolExecutionCompleted) (json.RawMessage, error) {
	return c.record(func(r *Record, b json.RawMessage) { r.Call = b }, CallOf(ev))
}

// Decision is the record of an approval decision.
func (c Codec) Decision(d loop.DecisionRecord) (json.RawMessage, error) {
	return c.record(func(r *Record, b json.RawMessage) { r.Decision = b }, d)
}

// Approved returns the ids of the calls that decision records among recs
// approved.
func (Codec) Approved(recs []json.RawMessage) map[string]bool {
	ok := map[string]bool{}
	for _, b := range recs {
		var r Record
		if json.Unmarshal(b, &r) != nil || len(r.Decision) == 0 {
			continue
		}
		var d loop.DecisionRecord
		if json.Unmarshal(r.Decision, &d) == nil && d.Answer.Approved() {
			ok[d.CallID] = true
		}
	}
	return ok
}

// History returns the messages among recs, in order.
func (Codec) History(recs []json.RawMessage) ([]loop.Message, error) {
	var msgs []json.RawMessage
	for i, b := range recs {
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		if len(r.Message) > 0 {
			msgs = append(msgs, r.Message)
		}
	}
	return Decode[loop.Message](msgs)
}

// DecodeRecords decodes records a Store returned; a record that does not decode
// is an error naming its index.
func DecodeRecords(raw []json.RawMessage) ([]Record, error) {
	out := make([]Record, 0, len(raw))
	for i, b := range raw {
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}
