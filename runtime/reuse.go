package runtime

import (
	"context"

	"github.com/agcore/agrun/internal/wasmbin"
	"github.com/tetratelabs/wazero/api"
)

// Instances reused after a clean call.
//
// Making an instance of a snapshotted reactor (prepare.go) is mostly
// wazero filling its function table (a Go module's thousands of ref.func
// elements, evaluated one by one, two allocations each), and closing it
// is mostly resetting its memory to the snapshot for the memory pool. A
// call that ended clean leaves an instance that differs from a fresh one
// only in state the runtime can put back exactly, so it is reset and
// kept for the next call instead: the reset is done either way, the
// instantiation is saved.
//
// What an instance holds, and why putting it back is exact:
//   - Its memory: rewritten page by page to the snapshot's image (the
//     same comparison as the pool's reset, mem_unix.go resetTo), and set
//     back to the snapshot's size if the guest grew it (shrinkTo: the next
//     call must see the memory.size a fresh instance has, and zeros
//     wherever it grows).
//   - Its mutable globals: the module's own are all exported for the
//     snapshot and set back to it; the meter's fuel and depth counters
//     (wasmbin.Instrument exports both) are set back to zero.
//   - Its tables and segments: a snapshotted module cannot change a table
//     or drop a segment (snapshot.go: no table.set/grow/fill/copy/init,
//     elem.drop, memory.init, data.drop), so they are what instantiation
//     made.
//   - WASI's state (wazero's file table, the stdio files, preopens): the
//     call may have called only WASI functions that leave it as it was
//     (keepsInstance): arguments, clocks, random, stdio reads and writes,
//     polls. Anything else (opening, closing, renumbering a descriptor,
//     changing its flags, any use of a descriptor beyond stdio) marks
//     the instance, which is then closed. Calls with mounts, Extism
//     plug-ins and calls with DisablePrepare are never reused.
//   - Everything the call bound (stdin, stdout, stderr, its contexts and
//     callbacks): dropped before the reset and bound anew by the next
//     call, as for a prepared instance. agrun's host functions keep their
//     state in the call's callState, never in the instance.
// A call that trapped, exited (proc_exit closes the instance), crossed a
// limit, timed out, ran out of fuel or was cancelled is never reused.
// TestReuseDifferential checks that every call sees what a fresh
// instance would, against guests that try to read what an earlier call
// left.

// mayReuse says whether a call's instance may be reused after the call
// (when it ends clean): not with DisablePrepare, mounts or an Extism
// plug-in.
func (r *Runtime) mayReuse(in Input) bool {
	return !r.cfg.DisablePrepare && len(in.Mounts) == 0 && in.Plugin == nil
}

// reusable says whether a call that ended clean left an instance that
// recycle can make exactly what a fresh one is: the call's contexts are
// still live, its instance is open and was prepared from the snapshot,
// and the guest used no WASI function that changes the instance.
func (c *call) reusable(g *guestRun, inst instance) bool {
	return inst.p != nil && g.ctx.Err() == nil && g.callCtx.Err() == nil &&
		!g.st.touchedInstance.Load() && !inst.mod.IsClosed()
}

// recycle resets a clean call's instance to its snapshot and makes it
// ready for the next call of its entry, or closes it if it cannot be
// reset exactly or there is no room for it. It ends the entry's count of
// instances being recycled and wakes calls waiting for one.
func (r *Runtime) recycle(c *compiled, inst instance) {
	p := inst.p
	ok := resetInstance(p, c.info.snap, inst.snap) && r.push(inst.entry, p)
	if ok {
		r.reused.Add(1)
	} else {
		p.mod.Close(context.Background())
	}
	e := inst.entry
	e.mu.Lock()
	e.recycling--
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
	e.mu.Unlock()
}

// resetInstance makes a prepared instance after its call what it was
// before (see above); false if it cannot.
func resetInstance(p *prepared, s *snapshotter, snap *snapshot) bool {
	p.unbind()
	mem, ok := p.mem.(interface {
		resetForReuse(size uint64, shrink func() bool) bool
	})
	if !ok || p.mod.IsClosed() {
		return false
	}
	if !mem.resetForReuse(snap.mem.size, func() bool { return shrinkTo(p.mod.Memory(), snap.mem.size) }) {
		return false
	}
	if restore(p.mod, s, snap) != nil {
		return false
	}
	for _, name := range []string{wasmbin.MeterFuelExport, wasmbin.MeterDepthExport} {
		g, ok := p.mod.ExportedGlobal(name).(api.MutableGlobal)
		if !ok {
			return false
		}
		g.Set(0)
	}
	return true
}

// memoryShrinker is experimental.MemoryShrinker of agrun's patched wazero
// (third_party/wazero.patch), named here by its method so that agrun
// still builds against upstream wazero, as it does for a program that
// imports agrun without go.mod's replace: there a grown memory is simply
// not reused.
type memoryShrinker interface{ Shrink(pages uint32) bool }

// shrinkTo gives memory the size (in bytes, whole pages) it started the
// call with, shrinking it if the guest grew it (memoryShrinker,
// agrun's wazero patch: wazevo's compiled code learns the new length as it
// learns a grown one, and the dropped bytes are zeroed), and says whether
// it has that size now. Called only between calls: no guest code is
// running on the instance.
func shrinkTo(memory api.Memory, size uint64) bool {
	pages, _ := memory.Grow(0)
	if uint64(pages)*65536 == size {
		return true
	}
	s, ok := memory.(memoryShrinker)
	return ok && uint64(pages)*65536 > size && size%65536 == 0 && s.Shrink(uint32(size/65536))
}

// keepsInstance says whether a call of WASI function name with params
// leaves the instance's WASI state (wazero 1.12's file table and files)
// as it was, in a call without mounts: functions that read arguments,
// clocks and random bytes, poll, yield or exit; the preopen queries
// (without mounts there is no preopened directory: they answer EBADF);
// and reads, writes, stats and flag changes of stdin, stdout and stderr
// (a call's stdio are agrun's readers and writers, which wazero wraps in
// files that are not pollable: setting O_NONBLOCK answers ENOSYS and
// records nothing, and O_APPEND applies to regular files only). Go's
// wasip1 runtime sets its stdio non-blocking in every call.
func keepsInstance(name string, params []uint64) bool {
	switch name {
	case "args_get", "args_sizes_get", "environ_get", "environ_sizes_get",
		"clock_res_get", "clock_time_get", "random_get", "sched_yield",
		"poll_oneoff", "proc_exit", "fd_prestat_get", "fd_prestat_dir_name":
		return true
	case "fd_read", "fd_write", "fd_fdstat_get", "fd_filestat_get", "fd_fdstat_set_flags":
		return len(params) > 0 && uint32(params[0]) <= 2
	}
	return false
}
