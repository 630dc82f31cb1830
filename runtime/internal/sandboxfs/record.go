package sandboxfs

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// Op is one kind of thing a guest did to a path, for a [Recorder].
type Op uint16

// The operations a Recorder tells apart.
const (
	OpOpen       Op = 1 << iota // opened (a file or a directory)
	OpRead                      // data read from it
	OpWrite                     // data written to it (or grown by truncate)
	OpCreate                    // created by an open with O_CREAT, or mkdir
	OpRenameFrom                // renamed away
	OpRenameTo                  // renamed to
	OpDelete                    // unlinked or removed (rmdir)
	OpTruncate                  // truncated
	OpList                      // its entries read (readdir)
	OpRefused                   // an operation on it refused by the mount's mode (EROFS, EPERM)
)

var opNames = []struct {
	op   Op
	name string
}{
	{OpOpen, "open"}, {OpRead, "read"}, {OpWrite, "write"}, {OpCreate, "create"},
	{OpRenameFrom, "rename_from"}, {OpRenameTo, "rename_to"}, {OpDelete, "delete"},
	{OpTruncate, "truncate"}, {OpList, "list"}, {OpRefused, "refused"},
}

// Names lists the operations in ops, in a fixed order.
func (ops Op) Names() []string {
	var out []string
	for _, o := range opNames {
		if ops&o.op != 0 {
			out = append(out, o.name)
		}
	}
	return out
}

// DefaultMaxRecordedPaths is the distinct paths a Recorder keeps when
// MaxPaths is zero.
const DefaultMaxRecordedPaths = 64

// maxRecordedPathBytes cuts a recorded path (a guest may name a path of
// any length in a failed call).
const maxRecordedPathBytes = 1024

// A Recorder collects what a guest did through an FS (Options.Recorder):
// per path (relative to the mount, "." for its root) the operations and
// the bytes read and written, for the first MaxPaths distinct paths, and
// totals over every path. Its memory is bounded by MaxPaths whatever the
// guest does. It is safe for concurrent use.
type Recorder struct {
	// MaxPaths bounds the paths kept; operations on further paths count
	// in the totals and in MorePaths only. Zero: DefaultMaxRecordedPaths.
	MaxPaths int

	mu    sync.Mutex
	paths map[string]*PathRecord
	order []string
	more  map[string]struct{} // further distinct paths, counted up to a bound
	moreN int

	opened, refused atomic.Int64
	readB, writtenB atomic.Int64
}

// PathRecord is what was done to one path.
type PathRecord struct {
	ops           atomic.Uint32
	read, written atomic.Int64
}

// PathStats is a PathRecord's value.
type PathStats struct {
	Path               string
	Ops                Op
	ReadBytes, Written int64
}

// Stats is a Recorder's content at one moment.
type Stats struct {
	Paths []PathStats // in the order they were first touched
	// MorePaths counts the distinct paths touched beyond Paths (exact up
	// to 4096 of them, then a lower bound).
	MorePaths int
	// Totals over every path.
	Opened, Refused, ReadBytes, WrittenBytes int64
}

// maxCountedMore bounds the set used to count distinct paths past
// MaxPaths.
const maxCountedMore = 4096

// path returns the record of p, or nil past MaxPaths.
func (rc *Recorder) path(p string) *PathRecord {
	if len(p) > maxRecordedPathBytes {
		p = p[:maxRecordedPathBytes] // cloned below, when kept: never hold the guest's whole string
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if pr := rc.paths[p]; pr != nil {
		return pr
	}
	limit := rc.MaxPaths
	if limit <= 0 {
		limit = DefaultMaxRecordedPaths
	}
	if len(rc.order) >= limit {
		if _, seen := rc.more[p]; !seen {
			if rc.more == nil {
				rc.more = map[string]struct{}{}
			}
			if len(rc.more) < maxCountedMore {
				rc.more[strings.Clone(p)] = struct{}{}
			}
			rc.moreN = max(rc.moreN, len(rc.more))
		}
		return nil
	}
	if rc.paths == nil {
		rc.paths = map[string]*PathRecord{}
	}
	pr := &PathRecord{}
	p = strings.Clone(p)
	rc.paths[p] = pr
	rc.order = append(rc.order, p)
	return pr
}

// op records op on path p and returns its record (nil past MaxPaths, or
// for a nil Recorder).
func (rc *Recorder) op(p string, op Op) *PathRecord {
	if rc == nil {
		return nil
	}
	if op&OpOpen != 0 {
		rc.opened.Add(1)
	}
	if op&OpRefused != 0 {
		rc.refused.Add(1)
	}
	pr := rc.path(p)
	pr.add(op)
	return pr
}

func (pr *PathRecord) add(op Op) {
	if pr != nil && Op(pr.ops.Load())&op == 0 {
		pr.ops.Or(uint32(op))
	}
}

// addRead counts n bytes read through a file whose path record is pr.
func (rc *Recorder) addRead(pr *PathRecord, n int) {
	if rc == nil || n <= 0 {
		return
	}
	rc.readB.Add(int64(n))
	if pr != nil {
		pr.add(OpRead)
		pr.read.Add(int64(n))
	}
}

// addWrite counts n bytes written through a file whose path record is pr.
func (rc *Recorder) addWrite(pr *PathRecord, n int64) {
	if rc == nil || n <= 0 {
		return
	}
	rc.writtenB.Add(n)
	if pr != nil {
		pr.add(OpWrite)
		pr.written.Add(n)
	}
}

// Stats returns what was recorded so far.
func (rc *Recorder) Stats() Stats {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s := Stats{
		MorePaths: rc.moreN, Opened: rc.opened.Load(), Refused: rc.refused.Load(),
		ReadBytes: rc.readB.Load(), WrittenBytes: rc.writtenB.Load(),
	}
	for _, p := range rc.order {
		pr := rc.paths[p]
		s.Paths = append(s.Paths, PathStats{Path: p, Ops: Op(pr.ops.Load()), ReadBytes: pr.read.Load(), Written: pr.written.Load()})
	}
	s.Paths = slices.Clip(s.Paths)
	return s
}

// note records op on name if errno is 0, or a refusal if the mount's
// mode refused it (EROFS, EPERM), and returns errno.
func (r *rootFS) note(name string, op Op, errno experimentalsys.Errno) experimentalsys.Errno {
	if r.rec != nil {
		switch errno {
		case 0:
			r.rec.op(rel(name), op)
		case experimentalsys.EROFS, experimentalsys.EPERM:
			r.rec.op(rel(name), OpRefused)
		}
	}
	return errno
}
