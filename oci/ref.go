package oci

import (
	"fmt"
	"regexp"
	"strings"

	"oras.land/oras-go/v2/registry"
)

// Ref is a parsed reference, HOST[:PORT]/REPO[:TAG][@sha256:DIGEST].
// Unlike oras-go's registry.Reference it keeps the tag of a pinned
// reference, so that the line agrun pull prints still says which tag was
// pinned.
type Ref struct {
	Registry   string // host or host:port
	Repository string
	Tag        string // "" if none
	Digest     string // "sha256:<64 hex>", "" if none
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParseRef parses s. A reference needs a registry host and a repository,
// and a tag, a digest or both; only sha256 digests are accepted. The
// error wraps ErrReference.
func ParseRef(s string) (Ref, error) {
	bad := func(why string) (Ref, error) {
		return Ref{}, fmt.Errorf("%w %q: %s (want HOST/REPO:TAG or HOST/REPO@sha256:DIGEST)", ErrReference, clean(s), why)
	}
	if len(s) > 1024 {
		return bad("longer than 1024 bytes")
	}
	host, path, ok := strings.Cut(s, "/")
	if !ok || host == "" || path == "" {
		return bad("no registry host")
	}
	var r Ref
	if i := strings.Index(path, "@"); i >= 0 {
		r.Digest = path[i+1:]
		path = path[:i]
		if !digestRE.MatchString(r.Digest) {
			return bad("the digest must be sha256: and 64 lowercase hex digits")
		}
	}
	// A tag follows the last ':' after the last '/' (a port is in host).
	if i := strings.LastIndex(path, ":"); i >= 0 {
		r.Tag = path[i+1:]
		path = path[:i]
		if r.Tag == "" {
			// "repo:@sha256:..." would print back without its ':'.
			return bad("empty tag after ':'")
		}
	}
	r.Registry, r.Repository = host, path
	if r.Tag == "" && r.Digest == "" {
		return bad("no tag or digest")
	}
	ref := registry.Reference{Registry: r.Registry, Repository: r.Repository, Reference: r.Tag}
	if err := ref.ValidateRegistry(); err != nil {
		return bad("bad registry host")
	}
	if err := ref.ValidateRepository(); err != nil {
		return bad("bad repository name (lowercase letters, digits and separators)")
	}
	if r.Tag != "" {
		if err := ref.ValidateReferenceAsTag(); err != nil {
			return bad("bad tag")
		}
	}
	return r, nil
}

// String is the reference as ParseRef reads it.
func (r Ref) String() string {
	s := r.Registry + "/" + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// Pinned reports whether the reference names a digest.
func (r Ref) Pinned() bool { return r.Digest != "" }

// reference is what to ask the registry for: the digest if there is one,
// else the tag.
func (r Ref) reference() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}
