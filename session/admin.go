package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agcore/agrun/loop"
)

// Admin is what `agrun sessions` does to whole sessions beyond reading
// their records: summarise them, remove one unless it is in use, prune
// the idle ones, compact one in place. Files, Mem and session/pgstore
// implement it and pass session/sessiontest's RunAdmin, so that every
// subcommand behaves alike on the local files and on a cluster's
// PostgreSQL. (Files keeps its methods of the same meaning without a
// context — Infos, Info, Remove, Prune, Compact — for the local path.)
//
// "In use" is the store's own notion: Files, a session another process
// has open (its lock); Mem and PostgreSQL see no runs, and a cluster wraps
// them in Guarded, which asks whether the session's workflow runs.
type Admin interface {
	Store
	// Summaries returns the Info of every session, most recently used
	// first (the same time: the greater id first).
	Summaries(ctx context.Context) ([]Info, error)
	// Summary returns session id's Info (ErrNotFound, ErrBadID).
	Summary(ctx context.Context, id string) (Info, error)
	// RemoveSession removes session id: ErrLocked, removing nothing,
	// while it is in use; ErrNotFound; ErrBadID. With a non-zero cutoff
	// it removes the session only if it was last used before cutoff,
	// decided under the session's lock (so that one used since the
	// caller listed it is kept), and reports whether it did.
	RemoveSession(ctx context.Context, id string, cutoff time.Time) (removed bool, err error)
	// CompactSession applies loop.Compact to the session's messages (the
	// big tool results of every turn but the last keep become short
	// notes), atomically and under the session's lock, keeping every
	// other record and the number of records (CompactRecords): a
	// session's seqs stay valid. It fails with ErrLocked while the
	// session is in use, ErrNotFound, ErrBadID, and with a *MessageError
	// for a message that does not decode, changing nothing. before and
	// after are the session's sizes in bytes (Files: its file; the
	// others: its records).
	CompactSession(ctx context.Context, id string, keep int) (before, after int64, err error)
}

// PruneStore removes the sessions of st last used before cutoff, as
// `agrun sessions prune` does. Each is decided again under its lock
// (RemoveSession with the cutoff), so a session used since it was listed
// is kept, and one in use is skipped (ErrLocked in Skipped). It fails only
// when the sessions cannot be listed.
func PruneStore(ctx context.Context, st Admin, cutoff time.Time) (Pruned, error) {
	infos, err := st.Summaries(ctx)
	if err != nil {
		return Pruned{}, err
	}
	var p Pruned
	for _, in := range infos {
		if !in.Updated.Before(cutoff) {
			p.Kept++
			continue
		}
		ok, err := st.RemoveSession(ctx, in.ID, cutoff)
		switch {
		case errors.Is(err, ErrNotFound): // removed meanwhile
		case err != nil:
			if p.Skipped == nil {
				p.Skipped = map[string]error{}
			}
			p.Skipped[in.ID] = err
		case !ok:
			p.Kept++ // used since it was listed
		default:
			p.Removed = append(p.Removed, in)
		}
	}
	return p, nil
}

// ExportOf returns what `agrun sessions export` writes of session id:
// its Info and its messages, and (Files) warnings for lines its reader
// dropped or cut.
func ExportOf(ctx context.Context, st Admin, id string) (Info, []loop.Message, []string, error) {
	info, err := st.Summary(ctx, id)
	if err != nil {
		return Info{}, nil, nil, err
	}
	recs, warnings, err := RecordsOf(ctx, st, id)
	if err != nil {
		return Info{}, nil, nil, err
	}
	var raw []json.RawMessage
	for _, r := range recs {
		if len(r.Message) > 0 {
			raw = append(raw, r.Message)
		}
	}
	msgs, err := Decode[loop.Message](raw)
	if err != nil {
		return Info{}, nil, nil, fmt.Errorf("session %s: %w", id, err)
	}
	return info, msgs, warnings, nil
}

// RecordsOf returns every record of session id in st, decoded, and (Files)
// warnings for lines its reader dropped or cut, as `agrun sessions show`
// prints them. An unknown id is an error matching ErrNotFound.
func RecordsOf(ctx context.Context, st Store, id string) ([]Record, []string, error) {
	if f, ok := st.(*Files); ok {
		return f.Records(id)
	}
	recs, err := loadRecords(ctx, st, id)
	return recs, nil, err
}

// loadRecords loads and decodes every record of session id.
func loadRecords(ctx context.Context, st Store, id string) ([]Record, error) {
	raw, err := st.Load(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	recs, err := DecodeRecords(raw)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	return recs, nil
}

// CompactRecords is CompactSession's rewrite of a session's records
// (what a Store's Load returned): loop.Compact over the messages, each
// message record whose message changed re-encoded with its time kept, every
// other record as it is. out has as many records as recs, in the same
// places; changed lists the indexes that differ. A record that does not
// decode is an error naming it, a message that does not decode a
// *MessageError.
func CompactRecords(recs []json.RawMessage, keep int) (out []json.RawMessage, changed []int, err error) {
	decoded, err := DecodeRecords(recs)
	if err != nil {
		return nil, nil, err
	}
	var at []int
	var raw []json.RawMessage
	for i, r := range decoded {
		if len(r.Message) > 0 {
			at = append(at, i)
			raw = append(raw, r.Message)
		}
	}
	msgs, err := Decode[loop.Message](raw)
	if err != nil {
		return nil, nil, err
	}
	out = slices.Clone(recs)
	for j, m := range loop.Compact(msgs, keep) {
		if messageEqual(m, msgs[j]) {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, nil, err
		}
		r := decoded[at[j]]
		r.Message = b
		line, err := json.Marshal(r)
		if err != nil {
			return nil, nil, err
		}
		out[at[j]] = line
		changed = append(changed, at[j])
	}
	return out, changed, nil
}

// messageEqual reports whether compaction left m as it was (loop.Compact
// changes only a tool message's Content and FullContent).
func messageEqual(a, b loop.Message) bool {
	return a.Content == b.Content && a.FullContent == b.FullContent
}

// Guarded is an Admin whose RemoveSession and CompactSession first ask
// InUse whether a run of the session is going on elsewhere — on a cluster,
// whether its workflow runs — and refuse such a session with ErrLocked, as
// Files refuses one that another process has open. The check comes before
// the store's own (its lock, its transaction): a run that starts between
// the two is not seen (docs/SCALING.md says what it then meets).
type Guarded struct {
	Admin
	// InUse reports whether session id has a run going on; an error
	// refuses the operation with it.
	InUse func(ctx context.Context, id string) (bool, error)
}

func (g *Guarded) check(ctx context.Context, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	busy, err := g.InUse(ctx, id)
	if err != nil {
		return fmt.Errorf("session %s: is a run going on? %w", id, err)
	}
	if busy {
		return fmt.Errorf("session %q: %w", id, ErrLocked)
	}
	return nil
}

// RemoveSession is the store's, refused while the session is in use.
func (g *Guarded) RemoveSession(ctx context.Context, id string, cutoff time.Time) (bool, error) {
	if err := g.check(ctx, id); err != nil {
		return false, err
	}
	return g.Admin.RemoveSession(ctx, id, cutoff)
}

// CompactSession is the store's, refused while the session is in use.
func (g *Guarded) CompactSession(ctx context.Context, id string, keep int) (int64, int64, error) {
	if err := g.check(ctx, id); err != nil {
		return 0, 0, err
	}
	return g.Admin.CompactSession(ctx, id, keep)
}

// SortInfos sorts infos as Summaries returns them: most recently used
// first, the greater id first at the same time.
func SortInfos(infos []Info) {
	slices.SortFunc(infos, func(a, b Info) int {
		if c := b.Updated.Compare(a.Updated); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
}

// --- Files as an Admin ---

// Summaries is Infos.
func (st *Files) Summaries(ctx context.Context) ([]Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return st.Infos()
}

// Summary is Info.
func (st *Files) Summary(ctx context.Context, id string) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	return st.Info(id)
}

// RemoveSession is Remove, or with a cutoff RemoveUnusedSince.
func (st *Files) RemoveSession(ctx context.Context, id string, cutoff time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return st.remove(id, cutoff)
}

// CompactSession is Compact.
func (st *Files) CompactSession(ctx context.Context, id string, keep int) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	return st.Compact(id, keep)
}

var _ Admin = (*Files)(nil)

// --- Mem as an Admin ---

// Summaries summarises every session (InfoOf), its last use the time of
// its last append.
func (m *Mem) Summaries(ctx context.Context) ([]Info, error) {
	ids, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, id := range ids {
		in, err := m.Summary(ctx, id)
		if errors.Is(err, ErrNotFound) { // deleted meanwhile
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	SortInfos(out)
	return out, nil
}

// Summary summarises session id (InfoOf), its last use the time of its
// last append.
func (m *Mem) Summary(ctx context.Context, id string) (Info, error) {
	recs, err := loadRecords(ctx, m, id)
	if err != nil {
		return Info{}, err
	}
	in := InfoOf(id, recs)
	m.mu.Lock()
	in.Updated = m.updated[id]
	m.mu.Unlock()
	if in.Created.IsZero() {
		in.Created = in.Updated
	}
	return in, nil
}

// RemoveSession removes session id (with a cutoff: only if its last
// append was before it). Mem sees no runs: wrap it in Guarded for that.
func (m *Mem) RemoveSession(ctx context.Context, id string, cutoff time.Time) (bool, error) {
	if !ValidID(id) {
		return false, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[id]; !ok {
		return false, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if !cutoff.IsZero() && !m.updated[id].Before(cutoff) {
		return false, nil
	}
	delete(m.sessions, id)
	delete(m.updated, id)
	return true, nil
}

// CompactSession compacts session id in place (CompactRecords), under
// the store's lock.
func (m *Mem) CompactSession(ctx context.Context, id string, keep int) (int64, int64, error) {
	if !ValidID(id) {
		return 0, 0, fmt.Errorf("session %q: %w", id, ErrBadID)
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	have, ok := m.sessions[id]
	if !ok {
		return 0, 0, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	out, _, err := CompactRecords(have, keep)
	if err != nil {
		return 0, 0, fmt.Errorf("session %s: %w", id, err)
	}
	m.sessions[id] = out
	return recordBytes(have), recordBytes(out), nil
}

// recordBytes is the size of a session's records.
func recordBytes(recs []json.RawMessage) int64 {
	var n int64
	for _, r := range recs {
		n += int64(len(r))
	}
	return n
}

var _ Admin = (*Mem)(nil)
