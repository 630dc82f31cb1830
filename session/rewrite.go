package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/atomicfile"
	"github.com/agcore/agrun/internal/flock"
	"github.com/agcore/agrun/loop"
)

// ErrDamaged is returned by Rewrite for a session with lines the reader
// drops or cuts (a torn or foreign line, a line over 64 MiB): rewriting
// would lose them for good, so the file is left as it is.
var ErrDamaged = errors.New("the session has damaged lines; it is left as it is")

// Rewrite replaces the messages of session id with what fn returns from
// them, atomically (a temporary file, fsynced, renamed over the session:
// a crash leaves the old file or the new one, never half of either). It
// holds the session's lock while it works, so it fails with ErrLocked
// when another process has the session open, and with ErrNotFound when
// there is no such session. Request and call records are kept. fn gets the messages as Load returns them
// (lines Load would drop are dropped); when it returns as many messages as
// it got, each keeps its recorded time. before and after are the file's
// sizes. A message that does not fit a line even with its long strings
// cut fails the rewrite, leaving the file as it was.
func (st *Files) Rewrite(id string, fn func([]json.RawMessage) ([]json.RawMessage, error)) (before, after int64, err error) {
	if !ValidID(id) {
		return 0, 0, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	path := st.path(id)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("session %q: %w", id, err)
	}
	defer f.Close()
	if err := lockCurrent(f, path); err != nil {
		return 0, 0, fmt.Errorf("session %q: %w", id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("session %q: %w", id, err)
	}
	all, _, warnings, err := readRecords(f)
	if err != nil {
		return 0, 0, fmt.Errorf("session %q: %w", id, err)
	}
	if len(warnings) > 0 {
		// Rewriting would make what the reader dropped or cut final.
		return 0, 0, fmt.Errorf("session %q: %w: %s", id, ErrDamaged, strings.Join(warnings, "; "))
	}
	// fn sees the messages; the other records (requests' usage, tool
	// calls' audits) are kept as they are, in time order among the
	// messages.
	var recs, requests []record
	for _, r := range all {
		if len(r.Message) != 0 {
			recs = append(recs, r)
		} else {
			requests = append(requests, r)
		}
	}
	msgs := make([]json.RawMessage, len(recs))
	for i, r := range recs {
		msgs[i] = r.Message
	}
	out, err := fn(msgs)
	if err != nil {
		return 0, 0, fmt.Errorf("session %q: %w", id, err)
	}
	now := time.Now().UTC()
	var buf bytes.Buffer
	writeRequests := func(before time.Time) error { // the request records up to before
		for len(requests) > 0 && !requests[0].Time.After(before) {
			line, err := json.Marshal(requests[0])
			if err != nil {
				return err
			}
			buf.Write(append(line, '\n'))
			requests = requests[1:]
		}
		return nil
	}
	for i, m := range out {
		t := now
		if len(out) == len(recs) {
			t = recs[i].Time
		}
		if err := writeRequests(t); err != nil {
			return 0, 0, fmt.Errorf("session %q: %w", id, err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, m); err != nil {
			return 0, 0, fmt.Errorf("session %q: message %d is not JSON: %w", id, i+1, err)
		}
		line, err := json.Marshal(record{Time: t, Message: c.Bytes()})
		if err != nil {
			return 0, 0, fmt.Errorf("session %q: %w", id, err)
		}
		line = append(line, '\n')
		if len(line) > maxLine {
			short, ok := shrink(line)
			if !ok {
				return 0, 0, fmt.Errorf("session %q: message %d: %w", id, i+1, ErrTooLarge)
			}
			line = short
		}
		buf.Write(line)
	}
	if err := writeRequests(time.Unix(1<<62, 0)); err != nil { // the rest, whatever their times
		return 0, 0, fmt.Errorf("session %q: %w", id, err)
	}
	if err := atomicfile.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		return 0, 0, fmt.Errorf("session %q: %w", id, err)
	}
	return fi.Size(), int64(buf.Len()), nil
}

// lockCurrent takes f's exclusive lock without waiting (ErrLocked if
// another process holds it) and checks that f is still the file at path:
// a Rewrite may have replaced it between the open and the lock, and a
// lock on the replaced file would guard nothing.
func lockCurrent(f *os.File, path string) error {
	if err := flock.TryLock(f); err != nil {
		if errors.Is(err, flock.ErrLocked) {
			return ErrLocked
		}
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	cur, err := os.Stat(path)
	if err != nil || !os.SameFile(fi, cur) {
		return errReplaced
	}
	return nil
}

// errReplaced: the file was replaced (by Rewrite) while it was being
// opened; opening it again finds the new one.
var errReplaced = errors.New("the session file was replaced while it was opened")

// Compact rewrites session id smaller, as `agrun sessions compact` does:
// loop.Compact over its messages (the big tool results of every turn but
// the last keep become short notes), through Rewrite, so it is atomic
// and fails as Rewrite does (ErrLocked, ErrNotFound, ErrBadID,
// ErrDamaged) and with a *MessageError for a message that does not
// decode. before and after are the file's sizes.
func (st *Files) Compact(id string, keep int) (before, after int64, err error) {
	return st.Rewrite(id, func(raw []json.RawMessage) ([]json.RawMessage, error) {
		msgs, err := Decode[loop.Message](raw)
		if err != nil {
			return nil, err
		}
		out := make([]json.RawMessage, 0, len(msgs))
		for _, m := range loop.Compact(msgs, keep) {
			b, err := json.Marshal(m)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		return out, nil
	})
}
