package sandboxfs

import (
	"io"
	"os"
	"sync"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"

	"github.com/agcore/agrun/runtime/internal/sandboxfs/_seek"
)

// file implements experimentalsys.File over an *os.File opened through the
// root. A mutex makes it safe for concurrent use (wazero itself calls it
// from one goroutine at a time).
type file struct {
	seek.Adapter // Seek (forwarding to file.seek; see package seek for why) and wazero's defaults

	fsys   *rootFS
	access experimentalsys.Oflag // O_RDONLY, O_WRONLY or O_RDWR
	isDir  bool
	dev    uint64
	ino    sys.Inode

	rec  *PathRecord // what the Recorder keeps of this file's path; nil: none or past its bound
	root bool        // the mount's root, opened without a record (see OpenFile)

	mu     sync.Mutex
	f      *os.File
	append bool
	closed bool
}

func (f *file) canWrite() bool { return f.access != experimentalsys.O_RDONLY }

// Dev implements experimentalsys.File.
func (f *file) Dev() (uint64, experimentalsys.Errno) { return f.dev, 0 }

// Ino implements experimentalsys.File.
func (f *file) Ino() (sys.Inode, experimentalsys.Errno) { return f.ino, 0 }

// IsDir implements experimentalsys.File.
func (f *file) IsDir() (bool, experimentalsys.Errno) { return f.isDir, 0 }

// IsAppend implements experimentalsys.File.
func (f *file) IsAppend() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.append
}

// SetAppend implements experimentalsys.File. Append mode is emulated (each
// write goes to the end of the file), so no reopen is needed.
func (f *file) SetAppend(enable bool) experimentalsys.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.check(true, false); errno != 0 {
		return errno
	}
	f.append = enable
	return 0
}

// check returns EBADF if the file is closed, and EISDIR/EBADF if the
// operation needs a regular file / a directory and this is not one.
func (f *file) check(wantFile, wantDir bool) experimentalsys.Errno {
	switch {
	case f.closed:
		return experimentalsys.EBADF
	case wantFile && f.isDir:
		return experimentalsys.EISDIR
	case wantDir && !f.isDir:
		return experimentalsys.EBADF
	}
	return 0
}

// Stat implements experimentalsys.File.
func (f *file) Stat() (sys.Stat_t, experimentalsys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return sys.Stat_t{}, experimentalsys.EBADF
	}
	fi, err := f.f.Stat()
	if err != nil {
		return sys.Stat_t{}, toErrno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Read implements experimentalsys.File.
func (f *file) Read(buf []byte) (int, experimentalsys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.check(true, false); errno != 0 {
		return 0, errno
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.f.Read(buf)
	f.fsys.rec.addRead(f.rec, n)
	if err == io.EOF {
		err = nil
	}
	return n, toErrno(err)
}

// Pread implements experimentalsys.File.
func (f *file) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.check(true, false); errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, experimentalsys.EINVAL
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.f.ReadAt(buf, off)
	f.fsys.rec.addRead(f.rec, n)
	if err == io.EOF {
		err = nil
	}
	return n, toErrno(err)
}

// seek implements experimentalsys.File's Seek (through seek.Adapter).
// Seeking a directory to 0 rewinds it (the next Readdir reads it afresh).
func (f *file) seek(offset int64, whence int) (int64, experimentalsys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if uint(whence) > io.SeekEnd {
		return 0, experimentalsys.EINVAL
	}
	if f.isDir && (offset != 0 || whence != io.SeekStart) {
		return 0, experimentalsys.EISDIR
	}
	n, err := f.f.Seek(offset, whence)
	return n, toErrno(err)
}

// Readdir implements experimentalsys.File. Entry details are read with
// fstatat on the directory's own descriptor, never by host path.
func (f *file) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.check(false, true); errno != 0 {
		return nil, errno
	}
	fis, err := f.f.Readdir(n)
	if f.rec == nil && f.root {
		f.rec, f.root = f.fsys.rec.op(".", OpList), false
	}
	f.rec.add(OpList)
	if err == io.EOF {
		err = nil
	}
	if err != nil {
		return nil, toErrno(err)
	}
	ds := make([]experimentalsys.Dirent, 0, len(fis))
	for _, fi := range fis {
		st := sys.NewStat_t(fi)
		ds = append(ds, experimentalsys.Dirent{Name: fi.Name(), Ino: st.Ino, Type: fi.Mode().Type()})
	}
	return ds, 0
}

// writable returns the errno for a change to this file's data or metadata:
// EROFS on a read-only mount, EBADF if the descriptor was not opened for
// writing (needData), EISDIR for data on a directory.
func (f *file) writable(needData bool) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if f.fsys.readOnly() {
		return experimentalsys.EROFS
	}
	if needData {
		if f.isDir {
			return experimentalsys.EISDIR
		}
		if !f.canWrite() {
			return experimentalsys.EBADF
		}
	}
	return 0
}

// Write implements experimentalsys.File.
func (f *file) Write(buf []byte) (int, experimentalsys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.writable(true); errno != 0 {
		return 0, errno
	}
	if len(buf) == 0 {
		return 0, 0
	}
	take := f.fsys.reserve(int64(len(buf)))
	if take == 0 {
		return 0, errNoSpace
	}
	if f.append {
		if _, err := f.f.Seek(0, io.SeekEnd); err != nil {
			f.fsys.refund(take)
			return 0, toErrno(err)
		}
	}
	n, err := f.f.Write(buf[:take])
	f.fsys.refund(take - int64(n))
	f.fsys.rec.addWrite(f.rec, int64(n))
	return n, toErrno(err)
}

// Pwrite implements experimentalsys.File.
func (f *file) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.writable(true); errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, experimentalsys.EINVAL
	}
	if len(buf) == 0 {
		return 0, 0
	}
	take := f.fsys.reserve(int64(len(buf)))
	if take == 0 {
		return 0, errNoSpace
	}
	n, err := f.f.WriteAt(buf[:take], off)
	f.fsys.refund(take - int64(n))
	f.fsys.rec.addWrite(f.rec, int64(n))
	return n, toErrno(err)
}

// Truncate implements experimentalsys.File. Growth counts against
// MaxWriteBytes.
func (f *file) Truncate(size int64) experimentalsys.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.writable(true); errno != 0 {
		return errno
	}
	if size < 0 {
		return experimentalsys.EINVAL
	}
	fi, err := f.f.Stat()
	if err != nil {
		return toErrno(err)
	}
	if shared(fi) {
		return experimentalsys.EPERM
	}
	var charged int64
	if f.fsys.opts.MaxWriteBytes > 0 {
		if grow := size - fi.Size(); grow > 0 {
			if charged = f.fsys.reserve(grow); charged < grow {
				f.fsys.refund(charged)
				return errNoSpace
			}
		}
	}
	if err := f.f.Truncate(size); err != nil {
		f.fsys.refund(charged)
		return toErrno(err)
	}
	f.rec.add(OpTruncate)
	if grow := size - fi.Size(); grow > 0 {
		f.fsys.rec.addWrite(f.rec, grow)
	}
	return 0
}

// Sync implements experimentalsys.File.
func (f *file) Sync() experimentalsys.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return experimentalsys.EBADF
	}
	return toErrno(f.f.Sync())
}

// Datasync implements experimentalsys.File.
func (f *file) Datasync() experimentalsys.Errno { return f.Sync() }

// Utimens implements experimentalsys.File, on the descriptor itself.
func (f *file) Utimens(atim, mtim int64) experimentalsys.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.writable(false); errno != 0 {
		return errno
	}
	if !f.isDir {
		fi, err := f.f.Stat()
		if err != nil {
			return toErrno(err)
		}
		if shared(fi) {
			return experimentalsys.EPERM
		}
	}
	return futimens(f.f, atim, mtim)
}

// Close implements experimentalsys.File. It is idempotent.
func (f *file) Close() experimentalsys.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0
	}
	f.closed = true
	f.fsys.open.Add(-1)
	return toErrno(f.f.Close())
}
