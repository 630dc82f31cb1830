package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agcore/agrun/internal/atomicfile"
)

// DirObjects is an ObjectStore on a directory of the local file system
// (or a shared one mounted by every process): the object under key
// "a/b/c" is the file dir/a/b/c. Files are written with mode 0600,
// folders with 0700. It is safe for concurrent use by many goroutines and
// processes: Put writes a temporary file, syncs it and renames it over
// the key (internal/atomicfile), so a reader sees a whole object or none.
//
// Keys are checked with ValidKey before any path is built, so no key
// names anything outside dir; the directory itself is trusted (whoever
// can write to it can change what the store serves, which ModuleStore's
// digest check catches for modules). A key that is a folder of other
// keys ("a" when "a/b" exists) cannot hold an object there, unlike S3.
type DirObjects struct {
	dir string
}

// NewDirObjects returns the store on dir, creating it (mode 0700) if it
// does not exist. A crashed Put can leave a temporary file behind
// (atomicfile.TempPrefix); List never reports one.
func NewDirObjects(dir string) (*DirObjects, error) {
	if dir == "" {
		return nil, errors.New("object store directory: empty path")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("object store directory: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("object store directory: %w", err)
	}
	return &DirObjects{dir: abs}, nil
}

// Dir returns the store's directory (absolute).
func (d *DirObjects) Dir() string { return d.dir }

func (d *DirObjects) path(key string) (string, error) {
	if !ValidKey(key) {
		return "", fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	return filepath.Join(d.dir, filepath.FromSlash(key)), nil
}

// Put writes data under key atomically, replacing what was there.
func (d *DirObjects) Put(ctx context.Context, key string, data []byte) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := atomicfile.WriteFile(p, data, 0o600); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Get reads the object under key: ErrNotFound if there is none,
// ErrTooLarge if it is over max bytes (max > 0). The size is checked
// before reading and the read is capped, so an object that grows under
// the reader is refused too.
func (d *DirObjects) Get(ctx context.Context, key string, max int64) ([]byte, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, fmt.Errorf("%w: object %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: object %s", ErrNotFound, key)
	}
	if max > 0 && fi.Size() > max {
		return nil, fmt.Errorf("%w: object %s is %d bytes, over %d", ErrTooLarge, key, fi.Size(), max)
	}
	var r io.Reader = f
	if max > 0 {
		r = io.LimitReader(f, max+1)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if max > 0 && int64(len(data)) > max {
		return nil, fmt.Errorf("%w: object %s is over %d bytes", ErrTooLarge, key, max)
	}
	return data, nil
}

// Delete removes the file of key: ErrNotFound if there is none or it is
// a folder. The folders above it stay (a later Put reuses them).
func (d *DirObjects) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: object %s", ErrNotFound, key)
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: object %s", ErrNotFound, key)
		}
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// List returns the keys under prefix, sorted. Files whose relative path
// is not a valid key (temporary files among them) are left out.
func (d *DirObjects) List(ctx context.Context, prefix string) ([]string, error) {
	if !ValidPrefix(prefix) {
		return nil, fmt.Errorf("%w: list prefix %q", ErrBadKey, prefix)
	}
	root := filepath.Join(d.dir, filepath.FromSlash(prefix))
	var keys []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == root && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return fs.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(d.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if e.IsDir() {
			if strings.HasPrefix(e.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		if e.Type().IsRegular() && ValidKey(key) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	slices.Sort(keys)
	return keys, nil
}
