package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// CheckAppend is the validation every SessionStore does before it writes
// anything: a ValidSessionID (ErrBadID), a seq >= 0, a non-empty batch of
// records each of valid JSON on one line (no raw newline: the JSON-lines
// store keeps a record a line) within MaxRecordBytes (ErrTooLarge).
// Stores outside this package (cmd/agrun's JSON-lines adapter) call it
// too, so that all refuse the same batches.
func CheckAppend(session string, seq int64, recs []json.RawMessage) error {
	if !ValidSessionID(session) {
		return fmt.Errorf("%w: %q", ErrBadID, session)
	}
	if seq < 0 {
		return fmt.Errorf("cluster: append to session %s: negative seq %d", session, seq)
	}
	if len(recs) == 0 {
		return fmt.Errorf("cluster: append to session %s at %d: no records", session, seq)
	}
	for i, r := range recs {
		if len(r) > MaxRecordBytes {
			return fmt.Errorf("%w: session %s record %d is %d bytes, over %d", ErrTooLarge, session, seq+int64(i), len(r), MaxRecordBytes)
		}
		if !json.Valid(r) {
			return fmt.Errorf("cluster: append to session %s: record %d is not valid JSON", session, seq+int64(i))
		}
		if bytes.ContainsAny(r, "\r\n") {
			return fmt.Errorf("cluster: append to session %s: record %d is not on one line", session, seq+int64(i))
		}
	}
	return nil
}

// CheckLoad validates Load's arguments.
func CheckLoad(session string, from int64) error {
	if !ValidSessionID(session) {
		return fmt.Errorf("%w: %q", ErrBadID, session)
	}
	if from < 0 {
		return fmt.Errorf("cluster: load session %s: negative seq %d", session, from)
	}
	return nil
}

// MemSessions is a SessionStore in memory, for tests (the workflow's
// unit tests among them) and single-process use: its sessions are gone
// when the process ends. It keeps the contract of the persistent stores
// exactly (the same test suite, cluster/storetest, runs against it) and
// copies records in and out, so callers may reuse their buffers. The zero
// value is ready to use; it is safe for concurrent use.
type MemSessions struct {
	mu       sync.Mutex
	sessions map[string][]json.RawMessage
}

// Append writes recs at seq, seq+1, ... (see SessionStore).
func (m *MemSessions) Append(ctx context.Context, session string, seq int64, recs []json.RawMessage) (bool, error) {
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
		return false, fmt.Errorf("%w: session %s: append at %d, next is %d", ErrSeqGap, session, seq, next)
	}
	if m.sessions == nil {
		m.sessions = map[string][]json.RawMessage{}
	}
	for _, r := range recs {
		have = append(have, slices.Clone(r))
	}
	m.sessions[session] = have
	return true, nil
}

// Load returns copies of the session's records from seq from on.
func (m *MemSessions) Load(ctx context.Context, session string, from int64) ([]json.RawMessage, error) {
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
		return nil, fmt.Errorf("%w: session %s", ErrNotFound, session)
	}
	out := []json.RawMessage{}
	for i := from; i < int64(len(have)); i++ {
		out = append(out, slices.Clone(have[i]))
	}
	return out, nil
}

// List returns the ids of the sessions, sorted.
func (m *MemSessions) List(ctx context.Context) ([]string, error) {
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
func (m *MemSessions) Delete(ctx context.Context, session string) error {
	if !ValidSessionID(session) {
		return fmt.Errorf("%w: %q", ErrBadID, session)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[session]; !ok {
		return fmt.Errorf("%w: session %s", ErrNotFound, session)
	}
	delete(m.sessions, session)
	return nil
}

var _ SessionStore = (*MemSessions)(nil)
