// Command read_file is an example agrun tool that declares the
// "filesystem" and "read" permissions: it reads a file (or lists a
// directory) under a path the operator mounted, such as /docs.
//
// Arguments: {"path":"/docs/readme.md","max_bytes":65536}. The result has
// the content as text when it is valid UTF-8, as base64 otherwise, and says
// whether it was cut at max_bytes (default 64 KiB, at most 512 KiB).
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"unicode/utf8"

	guest "github.com/agcore/agrun/guest-sdk"
)

const (
	defaultMax = 64 << 10
	hardMax    = 512 << 10
	maxEntries = 1000
)

// Args are the tool's arguments.
type Args struct {
	Path     string `json:"path"`
	MaxBytes int    `json:"max_bytes"`
}

// Entry is one directory entry.
type Entry struct {
	Name string `json:"name"`
	Dir  bool   `json:"dir,omitempty"`
	Size int64  `json:"size"`
}

// Result is the tool's answer: Content for a file, Entries for a directory.
type Result struct {
	Path      string  `json:"path"`
	Size      int64   `json:"size"`
	Content   *string `json:"content,omitempty"`
	Encoding  string  `json:"encoding,omitempty"` // "utf-8" or "base64"
	Truncated bool    `json:"truncated,omitempty"`
	Entries   []Entry `json:"entries,omitempty"`
}

func main() {
	guest.Run(readFile)
}

func readFile(_ context.Context, in Args) (Result, error) {
	if !path.IsAbs(in.Path) {
		return Result{}, fmt.Errorf("path %q must be absolute, under a mounted directory such as /docs", in.Path)
	}
	p := path.Clean(in.Path)
	limit := in.MaxBytes
	if limit <= 0 {
		limit = defaultMax
	}
	limit = min(limit, hardMax)

	f, err := os.Open(p)
	if err != nil {
		return Result{}, explain(p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Result{}, explain(p, err)
	}
	res := Result{Path: p, Size: st.Size()}
	if st.IsDir() {
		ents, err := f.ReadDir(maxEntries)
		if err != nil && err != io.EOF {
			return Result{}, explain(p, err)
		}
		res.Entries = []Entry{}
		for _, e := range ents {
			ent := Entry{Name: e.Name(), Dir: e.IsDir()}
			if info, err := e.Info(); err == nil && !e.IsDir() {
				ent.Size = info.Size()
			}
			res.Entries = append(res.Entries, ent)
		}
		res.Truncated = len(ents) == maxEntries
		return res, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return Result{}, explain(p, err)
	}
	if len(data) > limit {
		data, res.Truncated = data[:limit], true
	}
	content, enc := string(data), "utf-8"
	if !utf8.Valid(data) {
		// A cut in the middle of a character is still text.
		if trimmed := trimPartialRune(data); res.Truncated && utf8.Valid(trimmed) {
			content = string(trimmed)
		} else {
			content, enc = base64.StdEncoding.EncodeToString(data), "base64"
		}
	}
	res.Content, res.Encoding = &content, enc
	return res, nil
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// explain words a file error for the model.
func explain(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.EBADF):
		// EBADF: the path is under no mounted directory.
		return fmt.Errorf("%s: no such file (only mounted directories exist)", p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied", p)
	}
	return err
}
