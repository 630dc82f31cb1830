// Package store is what a cluster's processes share, as interfaces and
// the implementations that need nothing but the standard library: an
// ObjectStore (a directory: DirObjects; S3: package cluster/s3store)
// for modules (ModuleStore), the names of uploaded tools (ToolIndex,
// shared by agrun serve replicas) and payloads passed by reference.
// Every implementation passes cluster/storetest. Transcripts are kept in
// a session.Store (package session: files, memory; session/pgstore:
// PostgreSQL). A program that uses one store links only its
// client library: this package imports neither Temporal, the AWS SDK
// nor pgx.
//
//	objects, err := store.NewDirObjects("/var/lib/agrun/objects")
//	modules := store.ModuleStore{Objects: objects}
//	digest, err := modules.Put(ctx, wasm, manifest)
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrNotFound is returned (wrapped) by a store for a key it does not
// hold.
var ErrNotFound = errors.New("no such object in the store")

// ErrTooLarge is returned (wrapped) by ObjectStore.Get for an object over
// the size the caller accepts, and by stores for records over their cap.
var ErrTooLarge = errors.New("object too large")

// ErrBadKey is returned (wrapped) by an ObjectStore for a key that is not
// ValidKey, or a List prefix that is not a valid key followed by "/". A
// bad key never reaches the file system or the network.
var ErrBadKey = errors.New("invalid store key")

// ErrDigest is returned (wrapped) when stored content does not hash to the
// digest it is stored under (corruption, or tampering with the store).
var ErrDigest = errors.New("content does not match its digest")

// An ObjectStore keeps objects by key: a directory (DirObjects) or
// S3-compatible object storage (S3Objects). Most are content-addressed
// and never change (modules, payloads); the records of ToolIndex are
// replaced and deleted. Keys are slash-separated
// paths of [a-z0-9._-] segments (ValidKey). It is safe for concurrent use
// by many processes. Every method refuses a bad key with ErrBadKey.
type ObjectStore interface {
	// Put stores data under key atomically: a reader sees the whole
	// object or none (or what was there before). A second Put of a
	// key replaces the object (last writer wins): the same bytes for a
	// content-addressed key, a new record for a ToolIndex one.
	Put(ctx context.Context, key string, data []byte) error
	// Get returns the object under key: ErrNotFound if none, ErrTooLarge
	// if it is over max bytes (max > 0; max <= 0 means no cap).
	Get(ctx context.Context, key string, max int64) ([]byte, error)
	// List returns the keys under prefix (a folder, ending in "/"; ""
	// for every key), sorted byte-wise. Objects whose names are not
	// valid keys (put there by something else) are left out.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes the object under key: ErrNotFound if there is none
	// (a folder of other keys is not an object and stays). Content
	// addressed objects are never deleted by agrun; mutable records
	// (the tool index, ToolIndex) are.
	Delete(ctx context.Context, key string) error
}

// ValidKey reports whether key is a store key: one to eight segments of
// 1 to 128 bytes of [a-z0-9._-], each starting with a letter or a digit
// (so no ".", "..", hidden or temporary file names), joined by "/".
func ValidKey(key string) bool {
	segs := strings.Split(key, "/")
	if len(segs) == 0 || len(segs) > 8 {
		return false
	}
	for _, s := range segs {
		if s == "" || len(s) > 128 || !('a' <= s[0] && s[0] <= 'z' || '0' <= s[0] && s[0] <= '9') {
			return false
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ValidPrefix reports whether p is a List prefix: "" or a valid key
// followed by "/".
func ValidPrefix(p string) bool {
	k, ok := strings.CutSuffix(p, "/")
	return p == "" || ok && ValidKey(k)
}

// Digest is the hex SHA-256 of data, the name content is stored under.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ValidDigest reports whether d is a lowercase hex SHA-256.
func ValidDigest(d string) bool {
	if len(d) != 64 {
		return false
	}
	_, err := hex.DecodeString(d)
	return err == nil && strings.ToLower(d) == d
}

// ModuleKey is where ModuleStore keeps the module of digest.
func ModuleKey(digest string) string { return "sha256/" + digest + ".wasm" }

// ManifestKey is where ModuleStore keeps the manifest uploaded with the
// module of digest, beside it.
func ManifestKey(digest string) string { return "sha256/" + digest + ".manifest.json" }

// BlobKey is the key of a payload stored by reference, by its digest.
func BlobKey(digest string) string { return "blobs/sha256/" + digest }

// ModuleStore keeps WebAssembly modules content-addressed in an
// ObjectStore (sha256/<digest>.wasm), each with the manifest it was
// uploaded with beside it (sha256/<digest>.manifest.json; absent when the
// manifest is inside the module). Every read is verified against its
// digest.
type ModuleStore struct {
	Objects ObjectStore
	// MaxModuleBytes caps what Get reads (0: 64 MiB).
	MaxModuleBytes int64
}

// Put stores wasm and its manifest (nil: none) and returns the module's
// digest.
func (m ModuleStore) Put(ctx context.Context, wasm, manifest []byte) (string, error) {
	d := Digest(wasm)
	if manifest != nil {
		if err := m.Objects.Put(ctx, ManifestKey(d), manifest); err != nil {
			return "", err
		}
	}
	if err := m.Objects.Put(ctx, ModuleKey(d), wasm); err != nil {
		return "", err
	}
	return d, nil
}

// Get fetches the module stored under digest and its manifest (nil if it
// was stored without one), verifying the module's hash.
func (m ModuleStore) Get(ctx context.Context, digest string) (wasm, manifest []byte, err error) {
	if !ValidDigest(digest) {
		return nil, nil, fmt.Errorf("module digest %q: not a lowercase hex sha256", digest)
	}
	limit := m.MaxModuleBytes
	if limit <= 0 {
		limit = 64 << 20
	}
	wasm, err = m.Objects.Get(ctx, ModuleKey(digest), limit)
	if err != nil {
		return nil, nil, err
	}
	if Digest(wasm) != digest {
		return nil, nil, fmt.Errorf("%w: module %s", ErrDigest, digest)
	}
	manifest, err = m.Objects.Get(ctx, ManifestKey(digest), 1<<20)
	if errors.Is(err, ErrNotFound) {
		return wasm, nil, nil
	}
	return wasm, manifest, err
}

// List returns the digests of the stored modules, sorted.
func (m ModuleStore) List(ctx context.Context) ([]string, error) {
	keys, err := m.Objects.List(ctx, "sha256/")
	if err != nil {
		return nil, err
	}
	var ds []string
	for _, k := range keys {
		if d, ok := strings.CutSuffix(strings.TrimPrefix(k, "sha256/"), ".wasm"); ok && ValidDigest(d) {
			ds = append(ds, d)
		}
	}
	return ds, nil
}
