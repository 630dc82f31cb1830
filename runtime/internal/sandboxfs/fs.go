package sandboxfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// DefaultMaxOpenFiles is the number of files an FS keeps open at once when
// [Options.MaxOpenFiles] is zero.
const DefaultMaxOpenFiles = 1024

// Options says what a guest may do with a mount. The zero value is a
// read-only mount with the default open-file cap and no write budget.
type Options struct {
	// Writable allows creating, writing, truncating, renaming, linking,
	// symlinking and changing times and modes. If false, every change fails
	// with EROFS.
	Writable bool
	// AllowDelete allows unlink, rmdir and a rename that replaces an
	// existing entry. It has no effect unless Writable is set; without it
	// those fail with EPERM.
	AllowDelete bool
	// MaxOpenFiles caps the files open at once through this FS; opens
	// beyond it fail with EAGAIN (wazero's errno set, which is what WASI
	// preview 1 can carry to a guest, has no EMFILE). If zero,
	// DefaultMaxOpenFiles.
	MaxOpenFiles int
	// MaxWriteBytes caps the bytes written through this FS over its life
	// (data passed to write and pwrite, plus growth by truncate); writes
	// beyond it fail with EIO (a write that crosses it is cut short). EIO
	// because wazero has no ENOSPC: a full host disk reaches the guest as
	// EIO too. If zero or negative, writes are not capped.
	MaxWriteBytes int64
	// WriteCounter, if not nil, is where MaxWriteBytes is charged instead
	// of the FS's own counter: several FSes given the same counter share
	// one budget of MaxWriteBytes (give them all the same MaxWriteBytes).
	// It counts bytes already charged; start it at zero.
	WriteCounter *atomic.Int64
	// Recorder, if not nil, records what the guest does through this FS
	// (see [Recorder]): paths opened, read, written, created, renamed,
	// deleted, listed, and refusals.
	Recorder *Recorder
}

// Errnos for the caps, from the few wazero can pass to a WASI guest.
const (
	errTooManyOpen = experimentalsys.EAGAIN // would be EMFILE
	errNoSpace     = experimentalsys.EIO    // would be ENOSPC
)

// ErrNotDir is returned by New when the host path exists but is not a
// directory.
var ErrNotDir = errors.New("not a directory")

// New returns a file system serving the existing host directory hostDir
// under the rules in opts; see the package documentation for what it
// enforces. It fails if hostDir does not exist or is not a directory (the
// error wraps the cause, e.g. fs.ErrNotExist or ErrNotDir).
//
// The result also implements io.Closer: Close releases the directory
// descriptor it holds; call it once the module using the FS is closed (files
// the guest still has open stay valid until wazero closes them). The FS is
// safe for concurrent use.
func New(hostDir string, opts Options) (experimentalsys.FS, error) {
	st, err := os.Stat(hostDir)
	if err != nil {
		return nil, fmt.Errorf("mount %q: %w", hostDir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("mount %q: %w", hostDir, ErrNotDir)
	}
	root, err := os.OpenRoot(hostDir)
	if err != nil {
		return nil, fmt.Errorf("mount %q: %w", hostDir, err)
	}
	if opts.MaxOpenFiles <= 0 {
		opts.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if !opts.Writable {
		opts.AllowDelete = false
	}
	r := &rootFS{root: root, opts: opts, written: opts.WriteCounter, rec: opts.Recorder}
	if r.written == nil {
		r.written = new(atomic.Int64)
	}
	return r, nil
}

// rootFS implements experimentalsys.FS over an os.Root.
type rootFS struct {
	experimentalsys.UnimplementedFS

	root *os.Root
	opts Options

	open    atomic.Int64  // files currently open
	written *atomic.Int64 // bytes charged against MaxWriteBytes; maybe shared
	closed  atomic.Bool
	rec     *Recorder // nil: nothing recorded
}

// Close releases the root directory descriptor. Later path operations fail
// with EBADF; files already open are unaffected. Close is idempotent.
func (r *rootFS) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	return r.root.Close()
}

// String returns the host directory, for diagnostics.
func (r *rootFS) String() string { return r.root.Name() }

// rel turns a guest path (wazero passes cleaned relative paths; callers
// using the FS directly may pass anything) into a name for os.Root. Leading
// slashes are dropped so "/" and "" mean the root; os.Root refuses ".."
// and symlinks that leave the root.
func rel(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return p
}

func (r *rootFS) readOnly() bool { return !r.opts.Writable }

// OpenFile implements experimentalsys.FS.
func (r *rootFS) OpenFile(name string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	if r.rec == nil || rel(name) == "." {
		// The mount's root is opened by wazero itself (the preopen), so
		// its open says nothing of the guest: a guest listing it shows
		// as "list".
		f, errno := r.openChecked(name, flag, perm)
		if errno == 0 && r.rec != nil {
			f.(*file).root = true // recorded when listed
		}
		return f, errno
	}
	existed := true
	if flag&experimentalsys.O_CREAT != 0 {
		_, err := r.root.Lstat(rel(name))
		existed = err == nil
	}
	f, errno := r.openChecked(name, flag, perm)
	if errno != 0 {
		r.note(name, OpOpen, errno)
		return nil, errno
	}
	ops := OpOpen
	if !existed {
		ops |= OpCreate
	}
	if flag&experimentalsys.O_TRUNC != 0 {
		ops |= OpTruncate
	}
	ff := f.(*file)
	ff.rec = r.rec.op(rel(name), ops)
	return f, 0
}

// openChecked is OpenFile without the recording.
func (r *rootFS) openChecked(name string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	access := flag & (experimentalsys.O_RDWR | experimentalsys.O_WRONLY)
	writes := access != 0 || flag&(experimentalsys.O_CREAT|experimentalsys.O_TRUNC) != 0
	if writes && r.readOnly() {
		return nil, experimentalsys.EROFS
	}
	if flag&experimentalsys.O_DIRECTORY != 0 && access != 0 {
		return nil, experimentalsys.EISDIR
	}
	if n := r.open.Add(1); n > int64(r.opts.MaxOpenFiles) {
		r.open.Add(-1)
		return nil, errTooManyOpen
	}
	f, errno := r.openFile(name, flag, perm)
	if errno != 0 {
		r.open.Add(-1)
		return nil, errno
	}
	return f, 0
}

func (r *rootFS) openFile(name string, flag experimentalsys.Oflag, perm fs.FileMode) (*file, experimentalsys.Errno) {
	name = rel(name)
	if flag&experimentalsys.O_NOFOLLOW != 0 {
		// os.Root follows a final symlink (inside the root); honour the
		// guest's request not to.
		if fi, err := r.root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, experimentalsys.ELOOP
		}
	}
	// O_TRUNC is applied below, once the file is known not to be shared
	// (see shared); a read-only open that truncates opens for writing, as
	// truncating needs write permission anyway.
	access := flag & (experimentalsys.O_RDWR | experimentalsys.O_WRONLY)
	trunc := flag&experimentalsys.O_TRUNC != 0
	osFlag := toOSFlag(flag &^ experimentalsys.O_TRUNC)
	if trunc && access == 0 {
		osFlag |= os.O_RDWR
	}
	osf, err := r.root.OpenFile(name, osFlag, perm&fs.ModePerm)
	if err != nil {
		return nil, toErrno(err)
	}
	fi, err := osf.Stat()
	if err != nil {
		osf.Close()
		return nil, toErrno(err)
	}
	if t := fi.Mode().Type(); t != 0 && t != fs.ModeDir {
		osf.Close() // FIFOs, sockets, devices
		return nil, experimentalsys.EACCES
	}
	if (access != 0 || trunc) && shared(fi) {
		osf.Close()
		return nil, experimentalsys.EPERM
	}
	if trunc && !fi.IsDir() {
		if err := osf.Truncate(0); err != nil {
			osf.Close()
			return nil, toErrno(err)
		}
	}
	st := sys.NewStat_t(fi)
	f := &file{
		fsys:   r,
		f:      osf,
		access: access,
		append: flag&experimentalsys.O_APPEND != 0,
		isDir:  fi.IsDir(),
		dev:    st.Dev,
		ino:    st.Ino,
	}
	f.Adapter.Fn = f.seek
	return f, 0
}

// shared reports whether fi is a regular file with more than one link.
// Such a file may also be a file outside the mount (a hard link the host
// made; the guest cannot link to anything outside), so its data, times and
// mode are not the mount's to change: opening it for writing or with
// O_TRUNC, truncating it and changing its times or mode fail with EPERM.
func shared(fi fs.FileInfo) bool {
	return fi.Mode().IsRegular() && sys.NewStat_t(fi).Nlink > 1
}

// toOSFlag converts wazero's flags to os.OpenFile's. O_APPEND is emulated by
// the file (so SetAppend needs no reopen); O_NONBLOCK is always set so that
// opening a FIFO cannot block (such files are then refused).
func toOSFlag(flag experimentalsys.Oflag) int {
	var f int
	switch flag & (experimentalsys.O_RDWR | experimentalsys.O_WRONLY) {
	case experimentalsys.O_RDWR:
		f = os.O_RDWR
	case experimentalsys.O_WRONLY:
		f = os.O_WRONLY
	default:
		f = os.O_RDONLY
	}
	if flag&experimentalsys.O_CREAT != 0 {
		f |= os.O_CREATE
	}
	if flag&experimentalsys.O_EXCL != 0 {
		f |= os.O_EXCL
	}
	if flag&experimentalsys.O_TRUNC != 0 {
		f |= os.O_TRUNC
	}
	if flag&experimentalsys.O_SYNC != 0 {
		f |= os.O_SYNC
	}
	return withSyscallFlags(flag, f|syscall.O_NONBLOCK)
}

// Lstat implements experimentalsys.FS.
func (r *rootFS) Lstat(name string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Lstat(rel(name))
	if err != nil {
		return sys.Stat_t{}, toErrno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Stat implements experimentalsys.FS.
func (r *rootFS) Stat(name string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Stat(rel(name))
	if err != nil {
		return sys.Stat_t{}, toErrno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Mkdir implements experimentalsys.FS.
func (r *rootFS) Mkdir(name string, perm fs.FileMode) experimentalsys.Errno {
	return r.note(name, OpCreate, r.mkdir(name, perm))
}

func (r *rootFS) mkdir(name string, perm fs.FileMode) experimentalsys.Errno {
	if r.readOnly() {
		return experimentalsys.EROFS
	}
	errno := toErrno(r.root.Mkdir(rel(name), perm&fs.ModePerm))
	if errno == experimentalsys.ENOTDIR {
		errno = experimentalsys.ENOENT // as wazero's dirFS
	}
	return errno
}

// Chmod implements experimentalsys.FS. Only permission bits are applied.
func (r *rootFS) Chmod(name string, perm fs.FileMode) experimentalsys.Errno {
	if r.readOnly() {
		return experimentalsys.EROFS
	}
	name = rel(name)
	if fi, err := r.root.Stat(name); err != nil {
		return toErrno(err)
	} else if shared(fi) {
		return experimentalsys.EPERM
	}
	return toErrno(r.root.Chmod(name, perm&fs.ModePerm))
}

// Rename implements experimentalsys.FS.
func (r *rootFS) Rename(from, to string) experimentalsys.Errno {
	errno := r.rename(from, to)
	if errno == 0 {
		r.note(to, OpRenameTo, 0)
	}
	return r.note(from, OpRenameFrom, errno)
}

func (r *rootFS) rename(from, to string) experimentalsys.Errno {
	if r.readOnly() {
		return experimentalsys.EROFS
	}
	from, to = rel(from), rel(to)
	src, err := r.root.Lstat(from)
	if err != nil {
		return toErrno(err)
	}
	if src.Mode()&fs.ModeSymlink != 0 {
		target, err := r.root.Readlink(from)
		if err != nil {
			return toErrno(err)
		}
		if !descends(target) {
			return experimentalsys.EPERM
		}
	}
	if !r.opts.AllowDelete {
		if dst, err := r.root.Lstat(to); err == nil && !os.SameFile(src, dst) {
			return experimentalsys.EPERM // replacing deletes dst
		}
	}
	return toErrno(r.root.Rename(from, to))
}

// Rmdir implements experimentalsys.FS.
func (r *rootFS) Rmdir(name string) experimentalsys.Errno {
	return r.note(name, OpDelete, r.remove(name, true))
}

// Unlink implements experimentalsys.FS.
func (r *rootFS) Unlink(name string) experimentalsys.Errno {
	return r.note(name, OpDelete, r.remove(name, false))
}

// remove is Rmdir (dir) and Unlink (!dir): refused on a read-only mount
// (EROFS) or without AllowDelete (EPERM), and only for the right kind of
// entry (ENOTDIR, EISDIR). The mount itself cannot be removed.
func (r *rootFS) remove(name string, dir bool) experimentalsys.Errno {
	if r.readOnly() {
		return experimentalsys.EROFS
	}
	if !r.opts.AllowDelete {
		return experimentalsys.EPERM
	}
	name = rel(name)
	fi, err := r.root.Lstat(name)
	if err != nil {
		return toErrno(err)
	}
	switch {
	case dir && !fi.IsDir():
		return experimentalsys.ENOTDIR
	case !dir && fi.IsDir():
		return experimentalsys.EISDIR
	case name == ".":
		return experimentalsys.EINVAL // the mount itself, as rmdir(".")
	}
	return toErrno(r.root.Remove(name))
}

// Link implements experimentalsys.FS. Both names must be inside the mount,
// and oldName must not be a symlink.
func (r *rootFS) Link(oldName, newName string) experimentalsys.Errno {
	return r.note(newName, OpCreate, r.link(oldName, newName))
}

func (r *rootFS) link(oldName, newName string) experimentalsys.Errno {
	if r.readOnly() {
		return experimentalsys.EROFS
	}
	oldName, newName = rel(oldName), rel(newName)
	fi, err := r.root.Lstat(oldName)
	if err != nil {
		return toErrno(err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return experimentalsys.EPERM
	}
	if err := r.root.Link(oldName, newName); err != nil {
		return toErrno(err)
	}
	// oldName may have been swapped for a symlink between the check and
	// the link: undo that.
	if fi, err := r.root.Lstat(newName); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		r.root.Remove(newName)
		return experimentalsys.EPERM
	}
	return 0
}

// Symlink implements experimentalsys.FS. The target must be relative and
// must not contain "..": see the package documentation.
func (r *rootFS) Symlink(target, linkName string) experimentalsys.Errno {
	return r.note(linkName, OpCreate, r.symlink(target, linkName))
}

func (r *rootFS) symlink(target, linkName string) experimentalsys.Errno {
	if r.readOnly() {
		return experimentalsys.EROFS
	}
	if !descends(target) {
		return experimentalsys.EPERM
	}
	return toErrno(r.root.Symlink(target, rel(linkName)))
}

// descends reports whether a symlink target is relative and only goes down
// from the directory holding the link.
func descends(target string) bool {
	if target == "" || path.IsAbs(target) || strings.ContainsRune(target, 0) {
		return false
	}
	for _, c := range strings.Split(target, "/") {
		if c == ".." {
			return false
		}
	}
	return true
}

// Readlink implements experimentalsys.FS. It returns the target as stored,
// which may name a host path: a read-only disclosure the mount already
// allows by listing the link.
func (r *rootFS) Readlink(name string) (string, experimentalsys.Errno) {
	target, err := r.root.Readlink(rel(name))
	if err != nil {
		return "", toErrno(err)
	}
	return target, 0
}

// Utimens implements experimentalsys.FS.
func (r *rootFS) Utimens(name string, atim, mtim int64) experimentalsys.Errno {
	if r.readOnly() {
		return experimentalsys.EROFS
	}
	name = rel(name)
	fi, err := r.root.Stat(name)
	if err != nil {
		return toErrno(err)
	}
	if shared(fi) {
		return experimentalsys.EPERM
	}
	if atim == experimentalsys.UTIME_OMIT && mtim == experimentalsys.UTIME_OMIT {
		return 0
	}
	return toErrno(r.root.Chtimes(name, nanosToTime(atim), nanosToTime(mtim)))
}

// nanosToTime converts a wazero timestamp; UTIME_OMIT becomes the zero
// time, which os.Chtimes leaves unchanged.
func nanosToTime(n int64) time.Time {
	if n == experimentalsys.UTIME_OMIT {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// reserve charges up to n bytes against MaxWriteBytes and returns how many
// were granted.
func (r *rootFS) reserve(n int64) int64 {
	max := r.opts.MaxWriteBytes
	if max <= 0 || n <= 0 {
		return n
	}
	for {
		used := r.written.Load()
		left := max - used
		if left <= 0 {
			return 0
		}
		take := min(n, left)
		if r.written.CompareAndSwap(used, used+take) {
			return take
		}
	}
}

// refund returns bytes reserved but not written.
func (r *rootFS) refund(n int64) {
	if r.opts.MaxWriteBytes > 0 && n > 0 {
		r.written.Add(-n)
	}
}

// toErrno maps an os or os.Root error to an Errno. Errors that carry no
// system errno are os.Root refusing a path that leaves the root ("path
// escapes from parent"): EPERM, as wazero answers for "..".
func toErrno(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return experimentalsys.UnwrapOSError(en)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return experimentalsys.ENOENT
	case errors.Is(err, fs.ErrExist):
		return experimentalsys.EEXIST
	case errors.Is(err, fs.ErrClosed):
		return experimentalsys.EBADF
	case errors.Is(err, fs.ErrInvalid):
		return experimentalsys.EINVAL
	}
	return experimentalsys.EPERM
}
