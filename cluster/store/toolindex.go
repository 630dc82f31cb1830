package store

import (
	"bytes"
	"context"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agcore/agrun/registry"
)

// ErrBadName is returned (wrapped) by ToolIndex for a name that is not a
// tool name (registry.ValidName).
var ErrBadName = errors.New("invalid tool name")

// ToolRecord is what the tool index holds for one name: the module it
// names in the ModuleStore and when it was uploaded.
type ToolRecord struct {
	// Name is the tool's name (kept in the record too, so that the
	// object is readable on its own, and checked on every read).
	Name string `json:"name"`
	// SHA256 is the module's digest (ModuleKey).
	SHA256 string `json:"sha256"`
	// Size is the module's size in bytes.
	Size int64 `json:"size"`
	// Uploaded is when the module was stored under this name (UTC).
	Uploaded time.Time `json:"uploaded"`
	// Manifest reports that a manifest is stored beside the module
	// (ManifestKey); false: the manifest is inside it.
	Manifest bool `json:"manifest"`
}

// maxToolRecord caps what a read of one record accepts.
const maxToolRecord = 4 << 10

// ToolIndex maps tool names to the modules of a ModuleStore, in the same
// ObjectStore: the record of name is the JSON object ToolKey(name), one
// object per name, so that any number of processes (agrun serve
// replicas) share the index without a lock. Put replaces a record whole
// (last writer wins); a reader sees the old record or the new one. The
// zero value is not usable: set Objects. It is safe for concurrent use.
type ToolIndex struct {
	Objects ObjectStore
	// Tenant is the agrun serve tenant whose records these are: each
	// tenant's names are its own (two tenants may each have "x"), under
	// tenants/<Tenant>/tools/. Empty, or "default": tools/, where a serve
	// without tenants keeps them. A tenant name is [a-z0-9][a-z0-9_-]*,
	// at most 64 bytes (ErrBadName otherwise).
	Tenant string
}

// DefaultTenant is the tenant whose records are under tools/, the
// records of a serve without tenants (server.DefaultTenant).
const DefaultTenant = "default"

// prefix is the folder of x's records.
func (x ToolIndex) prefix() (string, error) {
	if x.Tenant == "" || x.Tenant == DefaultTenant {
		return toolsPrefix, nil
	}
	if len(x.Tenant) > 64 || !plainName(x.Tenant) {
		return "", fmt.Errorf("%w: tenant %q", ErrBadName, x.Tenant)
	}
	return "tenants/" + x.Tenant + "/" + toolsPrefix, nil
}

// key is the key of name's record in x: ToolKey under x's tenant.
func (x ToolIndex) key(name string) (string, error) {
	k, err := ToolKey(name)
	if err != nil {
		return "", err
	}
	p, err := x.prefix()
	if err != nil {
		return "", err
	}
	return p + strings.TrimPrefix(k, toolsPrefix), nil
}

// toolsPrefix is the folder of the records.
const toolsPrefix = "tools/"

// b32 is RFC 4648 base32 in lower case, without padding: only
// [a-z2-7], so an encoded name is a key segment whatever the name holds.
var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// plainName reports whether name can be its own key segment: a lowercase
// letter or a digit, then [a-z0-9_-] (most tool names: snake_case).
func plainName(name string) bool {
	if name == "" || !('a' <= name[0] && name[0] <= 'z' || '0' <= name[0] && name[0] <= '9') {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ToolKey is the key of name's record. Tool names allow what keys do
// not (upper case, a leading "_" or "-"), so the name is encoded, one
// name to one key and back:
//
//	tools/<name>.json          a name of [a-z0-9_-] starting with [a-z0-9]
//	tools/b32.<base32>.json    any other: lowercase RFC 4648 base32 of the name, unpadded
//
// A tool name never holds ".", so the two forms cannot collide; a
// 64-byte name is 103 base32 characters, within the 128 of a segment.
// ErrBadName if name is not registry.ValidName.
func ToolKey(name string) (string, error) {
	if !registry.ValidName(name) {
		return "", fmt.Errorf("%w: %q", ErrBadName, name)
	}
	if plainName(name) {
		return toolsPrefix + name + ".json", nil
	}
	return toolsPrefix + "b32." + b32.EncodeToString([]byte(name)) + ".json", nil
}

// toolNameIn is the inverse of ToolKey for the records under prefix
// (tools/, or a tenant's): the name whose record key is, or false for a
// key ToolKey never makes there.
func toolNameIn(key, prefix string) (string, bool) {
	seg, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", false
	}
	seg, ok = strings.CutSuffix(seg, ".json")
	if !ok {
		return "", false
	}
	name := seg
	if enc, ok := strings.CutPrefix(seg, "b32."); ok {
		b, err := b32.DecodeString(enc)
		if err != nil {
			return "", false
		}
		name = string(b)
	}
	if k, err := ToolKey(name); err != nil || prefix+strings.TrimPrefix(k, toolsPrefix) != key {
		return "", false // not canonical: not ours
	}
	return name, true
}

// Put records rec under rec.Name, replacing the record there (last
// writer wins, as an upload with replace does on one machine). rec must
// name a module digest (SHA256) and a size >= 0; Uploaded zero is set to
// now. Put does not check that the module is stored: store it first
// (ModuleStore.Put), so that a reader never finds a record without its
// module.
func (x ToolIndex) Put(ctx context.Context, rec ToolRecord) error {
	key, err := x.key(rec.Name)
	if err != nil {
		return err
	}
	if !ValidDigest(rec.SHA256) || rec.Size < 0 {
		return fmt.Errorf("tool %s: record needs a lowercase hex sha256 and a size >= 0", rec.Name)
	}
	if rec.Uploaded.IsZero() {
		rec.Uploaded = time.Now()
	}
	rec.Uploaded = rec.Uploaded.UTC()
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("tool %s: %w", rec.Name, err)
	}
	return x.Objects.Put(ctx, key, data)
}

// Get returns name's record: ErrNotFound if there is none, ErrBadName for
// a name that is not a tool name, and an error for a record that does not
// decode strictly, names another tool or no digest (a damaged or foreign
// object is never taken for a tool).
func (x ToolIndex) Get(ctx context.Context, name string) (ToolRecord, error) {
	key, err := x.key(name)
	if err != nil {
		return ToolRecord{}, err
	}
	data, err := x.Objects.Get(ctx, key, maxToolRecord)
	if err != nil {
		return ToolRecord{}, err
	}
	var rec ToolRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return ToolRecord{}, fmt.Errorf("tool record %s is damaged: %w", key, err)
	}
	if rec.Name != name || !ValidDigest(rec.SHA256) || rec.Size < 0 {
		return ToolRecord{}, fmt.Errorf("tool record %s is damaged: name %q, sha256 %q, size %d", key, rec.Name, rec.SHA256, rec.Size)
	}
	return rec, nil
}

// List returns every record, sorted by name, reading them a few at a
// time. A record deleted between the listing and its read is left out;
// a damaged one is left out too, and named in the error, which comes
// with the good records (a caller may use them: a worker does, serve's
// listing fails). Objects under tools/ that ToolKey does not make are
// ignored.
func (x ToolIndex) List(ctx context.Context) ([]ToolRecord, error) {
	prefix, err := x.prefix()
	if err != nil {
		return nil, err
	}
	keys, err := x.Objects.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, k := range keys {
		if n, ok := toolNameIn(k, prefix); ok {
			names = append(names, n)
		}
	}
	recs := make([]ToolRecord, len(names))
	found := make([]bool, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, n := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rec, err := x.Get(ctx, n)
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				errs[i] = err
			default:
				recs[i], found[i] = rec, true
			}
		})
	}
	wg.Wait()
	out := make([]ToolRecord, 0, len(recs))
	for i, r := range recs {
		if found[i] {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b ToolRecord) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}

// Delete removes name's record (ErrNotFound if none). The module stays in
// the ModuleStore: other names, and calls in flight on other processes,
// may use it.
func (x ToolIndex) Delete(ctx context.Context, name string) error {
	key, err := x.key(name)
	if err != nil {
		return err
	}
	return x.Objects.Delete(ctx, key)
}
