// Package atomicfile replaces a file so that a reader, or the same program
// after a crash, sees the old content or the new one, never half of it:
//
//	err := atomicfile.WriteFile("index.json", data, 0o600)
//
// The data goes to a temporary file in the same directory (its name starts
// with [TempPrefix]), which is synced, given its mode, renamed over the
// target and followed by a sync of the directory. A crash can leave the
// temporary file behind; whoever owns the directory may remove the names
// that start with TempPrefix when it starts.
//
// It uses only the standard library, so every package of the module may
// import it.
package atomicfile

import (
	"os"
	"path/filepath"
)

// TempPrefix starts the name of every temporary file WriteFile creates.
const TempPrefix = ".tmp-"

// WriteFile writes data to path atomically, with permission bits perm (not
// masked by the umask). On error path is unchanged and the temporary file
// is removed; the error is the one of the step that failed (an
// *fs.PathError or *os.LinkError). It is safe to call concurrently, also
// for one path: the last rename wins.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, perm)
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
