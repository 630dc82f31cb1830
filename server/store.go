package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/atomicfile"
	"github.com/agcore/agrun/internal/flock"
)

// The data directory:
//
//	<data_dir>/index.json           tenant -> name -> sha256, written atomically
//	<data_dir>/modules/<sha256>.wasm one file per distinct module, content-addressed
//	<data_dir>/sessions/            the sessions of POST /v1/runs (tenant "default")
//	<data_dir>/tenants/<name>/sessions/ those of every other tenant
//	<data_dir>/lock                 flocked by the Server using the directory
//
// index.json keeps the tools of tenant "default" under "tools", as a
// server without tenants always wrote them (version 1), and those of
// the other tenants under "tenants" (then version 2): a single-tenant
// directory is read as tenant "default", and a server of an older
// version refuses a directory it would misread (an unknown field).
// Modules are shared by content between tenants; what a tenant is
// answered never depends on another tenant's modules.
//
// Every file is written to a temporary name, fsynced, renamed into place
// and its directory fsynced, so a crash leaves either the old file or the
// new one. The index is the truth: a module file the index does not name
// (an upload cut short between the two writes) is removed at startup, and a
// tool exists only once the index names it.

const (
	indexFile  = "index.json"
	lockFile   = "lock"
	modulesDir = "modules"
)

// index is index.json.
type index struct {
	Version int                   `json:"version"`
	Tools   map[string]indexEntry `json:"tools"`
}

// indexEntry is one stored tool.
type indexEntry struct {
	SHA256   string    `json:"sha256"`
	Size     int64     `json:"size"`
	Uploaded time.Time `json:"uploaded"`
}

// diskIndex is index.json: the default tenant's tools where version 1
// kept them, every other tenant's under Tenants.
type diskIndex struct {
	Version int                              `json:"version"`
	Tools   map[string]indexEntry            `json:"tools"`
	Tenants map[string]map[string]indexEntry `json:"tenants,omitempty"`
}

// tenantIndexes are the stored tools of every tenant, by tenant name.
type tenantIndexes map[string]index

// refs reports whether a tool of any tenant uses the module sha.
func (all tenantIndexes) refs(sha string) bool {
	for _, ix := range all {
		if ix.refs(sha) {
			return true
		}
	}
	return false
}

func (ix index) clone() index {
	c := index{Version: ix.Version, Tools: make(map[string]indexEntry, len(ix.Tools))}
	for k, v := range ix.Tools {
		c.Tools[k] = v
	}
	return c
}

// refs reports whether any tool of ix uses the module sha.
func (ix index) refs(sha string) bool {
	for _, e := range ix.Tools {
		if e.SHA256 == sha {
			return true
		}
	}
	return false
}

// store is the on-disk side of uploaded tools. It is not safe for
// concurrent use: the Server serializes every change.
type store struct {
	dir  string
	lock *os.File // holds an flock on <dir>/lock while the store is open
}

// close releases the data directory's lock.
func (s *store) close() { s.lock.Close() }

var shaRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ErrDataDirLocked is returned by New when another Server (in this process
// or another) uses the data directory.
var ErrDataDirLocked = errors.New("the data directory is in use by another agrun serve")

// openStore creates the data directory (0700), locks it, and removes what
// a crash may have left: temporary files and modules the index does not
// name.
func openStore(dir string) (_ *store, _ tenantIndexes, err error) {
	s := &store{dir: dir}
	if err := os.MkdirAll(filepath.Join(dir, modulesDir), 0o700); err != nil {
		return nil, nil, fmt.Errorf("data dir: %w", err)
	}
	if s.lock, err = os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, nil, fmt.Errorf("data dir: %w", err)
	}
	defer func() {
		if err != nil {
			s.lock.Close()
		}
	}()
	if err := flock.TryLock(s.lock); err != nil {
		if errors.Is(err, flock.ErrLocked) {
			return nil, nil, fmt.Errorf("%w: %s", ErrDataDirLocked, dir)
		}
		return nil, nil, fmt.Errorf("locking the data dir: %w", err)
	}
	ix, err := s.readIndex()
	if err != nil {
		return nil, nil, err
	}
	for _, d := range []string{dir, filepath.Join(dir, modulesDir)} {
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, nil, fmt.Errorf("data dir: %w", err)
		}
		for _, e := range ents {
			name := e.Name()
			orphan := false
			if d != dir {
				sha, ok := strings.CutSuffix(name, ".wasm")
				orphan = ok && shaRE.MatchString(sha) && !ix.refs(sha)
			}
			if strings.HasPrefix(name, atomicfile.TempPrefix) || orphan {
				_ = os.Remove(filepath.Join(d, name))
			}
		}
	}
	return s, ix, nil
}

func (s *store) modulePath(sha string) string {
	return filepath.Join(s.dir, modulesDir, sha+".wasm")
}

// readIndex reads index.json, by tenant; a missing file is an empty
// index, and a version 1 file (no tenants) is tenant "default"'s.
func (s *store) readIndex() (tenantIndexes, error) {
	all := tenantIndexes{DefaultTenant: {Version: 1, Tools: map[string]indexEntry{}}}
	data, err := os.ReadFile(filepath.Join(s.dir, indexFile))
	if errors.Is(err, os.ErrNotExist) {
		return all, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the index: %w", err)
	}
	var di diskIndex
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&di); err != nil {
		return nil, fmt.Errorf("%s is damaged: %w", filepath.Join(s.dir, indexFile), err)
	}
	if di.Tools != nil {
		all[DefaultTenant] = index{Version: 1, Tools: di.Tools}
	}
	for tn, tools := range di.Tenants {
		if tn == DefaultTenant || !validTenantName(tn) {
			return nil, fmt.Errorf("%s: bad tenant name %q", filepath.Join(s.dir, indexFile), tn)
		}
		if tools == nil {
			tools = map[string]indexEntry{}
		}
		all[tn] = index{Version: 1, Tools: tools}
	}
	for tn, ix := range all {
		for name, e := range ix.Tools {
			if !shaRE.MatchString(e.SHA256) {
				return nil, fmt.Errorf("%s: tenant %q: tool %q: bad sha256 %q", filepath.Join(s.dir, indexFile), tn, name, e.SHA256)
			}
		}
	}
	return all, nil
}

// writeIndex replaces index.json atomically: version 1 while only
// tenant "default" stores tools, so that a single-tenant directory stays
// what it always was.
func (s *store) writeIndex(all tenantIndexes) error {
	di := diskIndex{Version: 1, Tools: map[string]indexEntry{}}
	for tn, ix := range all {
		switch {
		case tn == DefaultTenant:
			di.Tools = ix.Tools
		case len(ix.Tools) > 0:
			if di.Tenants == nil {
				di.Tenants = map[string]map[string]indexEntry{}
			}
			di.Tenants[tn] = ix.Tools
			di.Version = 2
		}
	}
	data, err := json.MarshalIndent(di, "", "  ")
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, indexFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the index: %w", err)
	}
	return nil
}

// putModule stores wasm under its hash, unless that file already exists
// intact.
func (s *store) putModule(sha string, wasm []byte) error {
	p := s.modulePath(sha)
	if fi, err := os.Stat(p); err == nil && fi.Size() == int64(len(wasm)) {
		if old, err := os.ReadFile(p); err == nil && hashOf(old) == sha {
			return nil
		}
	}
	if err := atomicfile.WriteFile(p, wasm, 0o600); err != nil {
		return fmt.Errorf("storing module %s: %w", sha, err)
	}
	return nil
}

// readModule reads the module stored under sha and checks its hash.
func (s *store) readModule(sha string) ([]byte, error) {
	wasm, err := os.ReadFile(s.modulePath(sha))
	if err != nil {
		return nil, fmt.Errorf("reading module: %w", err)
	}
	if got := hashOf(wasm); got != sha {
		return nil, fmt.Errorf("module %s is damaged (its sha256 is %s)", sha, got)
	}
	return wasm, nil
}

// removeModule deletes the module file of sha (errors are not fatal: an
// orphan is removed at the next start).
func (s *store) removeModule(sha string) {
	_ = os.Remove(s.modulePath(sha))
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
