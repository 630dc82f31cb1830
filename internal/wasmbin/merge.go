package wasmbin

import (
	"errors"
	"sort"
)

// maxMergeGap is the largest run of zero bytes MergeData inserts between
// two segments to join them.
const maxMergeGap = 4096

// ErrNotMergeable is returned by MergeData when merging cannot be proven
// to preserve the module's meaning, or would change nothing.
var ErrNotMergeable = errors.New("data segments not mergeable")

// MergeData returns module b, parsed as m, with its active data segments
// merged into as few segments as possible; or b unchanged and
// ErrNotMergeable when merging cannot be proven to preserve its meaning.
//
// wazero copies data segments into a fresh instance's memory one by one;
// a Go wasip1 module has tens of thousands of them, which dominates the
// cost of an instance. Merging is exact when
//
//   - every segment is active on memory 0 with an i32.const offset (so its
//     position is known without running anything),
//   - no two segments overlap (so the order of the copies does not matter),
//   - there is no data count section and no memory.init or data.drop (so
//     nothing refers to segments by index), and
//   - gaps are filled with zeros, which is what fresh memory holds and no
//     other segment writes there.
//
// Bounds are preserved too: the merged segments end where the originals
// ended, so a module whose segments did not fit still fails to instantiate.
func MergeData(b []byte, m *Module) ([]byte, error) {
	if m.HasDataCount || m.UsesDataIndex || len(m.Data) < 2 {
		return b, ErrNotMergeable
	}
	segs := make([]DataSegment, len(m.Data))
	copy(segs, m.Data)
	for _, s := range segs {
		// An empty segment writes nothing but is still bounds-checked;
		// modules worth merging have none, so keep it simple.
		if !s.Mergeable || len(s.Init) == 0 {
			return b, ErrNotMergeable
		}
	}
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].Offset < segs[j].Offset })
	type run struct {
		start uint64
		parts []DataSegment
		end   uint64
	}
	var runs []run
	for _, s := range segs {
		start, end := uint64(s.Offset), uint64(s.Offset)+uint64(len(s.Init))
		if n := len(runs); n > 0 && runs[n-1].end > start {
			return b, ErrNotMergeable // overlap
		}
		if n := len(runs); n > 0 && start-runs[n-1].end <= maxMergeGap {
			runs[n-1].parts = append(runs[n-1].parts, s)
			runs[n-1].end = end
			continue
		}
		runs = append(runs, run{start: start, end: end, parts: []DataSegment{s}})
	}
	if len(runs) == len(segs) {
		return b, ErrNotMergeable
	}
	// Encode the new data section.
	var sec []byte
	sec = AppendU32(sec, uint32(len(runs)))
	for _, rn := range runs {
		if len(rn.parts) == 1 {
			sec = append(sec, rn.parts[0].Raw...)
			continue
		}
		sec = append(sec, 0x00, 0x41)
		sec = AppendS32(sec, int32(uint32(rn.start)))
		sec = append(sec, 0x0b)
		size := rn.end - rn.start
		sec = AppendU32(sec, uint32(size))
		base := len(sec)
		sec = append(sec, make([]byte, size)...)
		for _, p := range rn.parts {
			copy(sec[base+int(uint64(p.Offset)-rn.start):], p.Init)
		}
	}
	out := make([]byte, 0, len(b)+16)
	prev := 0
	for _, s := range m.Sections {
		if s.ID != SecData {
			continue
		}
		out = append(out, b[prev:s.Start]...)
		out = append(out, SecData)
		out = AppendU32(out, uint32(len(sec)))
		out = append(out, sec...)
		prev = s.End
	}
	out = append(out, b[prev:]...)
	return out, nil
}
