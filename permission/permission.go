// Package permission defines the permissions a tool may declare and the
// Checker that decides, before a tool runs, whether the operator's policy
// lets it.
//
// A Checker is built once from a Config and is safe for concurrent use:
//
//	c := permission.NewChecker(permission.DefaultConfig())
//	if err := c.Check("read_file", []permission.Permission{permission.Read}); err != nil {
//		// err is a *permission.DeniedError naming the tool, the permission and the rule
//	}
//
// The rules, applied to each declared permission in order, are:
//
//  1. in Denied: denied (rule [RuleDenyList]);
//  2. in Allowed: allowed;
//  3. Allowed is non-empty (allow-list mode): denied (rule [RuleNotAllowed]);
//  4. Allowed is empty: Config.AllowUnspecified decides (rule [RuleUnspecified]).
//
// A tool that declares no permissions runs only when AllowUnspecified is true.
package permission

import (
	"errors"
	"fmt"
	"strings"
)

// Permission is one capability a tool may declare: one of the built-in
// values (Read, Write, Delete, Network, Shell, Filesystem) or a custom
// permission written "custom:<name>". The zero value is not a valid
// permission. Permission marshals to and from its text form, so it can be
// used directly in JSON and TOML documents.
type Permission struct {
	name string // "read", ..., or "custom:<name>"
}

// The built-in permissions.
var (
	Read       = Permission{"read"}
	Write      = Permission{"write"}
	Delete     = Permission{"delete"}
	Network    = Permission{"network"}
	Shell      = Permission{"shell"}
	Filesystem = Permission{"filesystem"}
)

// customPrefix starts every custom permission's text form.
const customPrefix = "custom:"

// maxCustomName bounds the length of a custom permission's name.
const maxCustomName = 64

// ErrInvalid is returned (wrapped) by Parse for text that names no permission.
var ErrInvalid = errors.New("invalid permission")

// Custom returns the custom permission with the given name. It returns an
// error if name is empty, longer than 64 bytes, or contains characters other
// than letters, digits, '_', '-', '.', and ':'.
func Custom(name string) (Permission, error) {
	return Parse(customPrefix + name)
}

// Parse returns the permission whose text form is s: "read", "write",
// "delete", "network", "shell", "filesystem" or "custom:<name>". Unknown
// names, an empty custom name, and custom names with characters outside
// [A-Za-z0-9_.:-] are errors wrapping ErrInvalid.
func Parse(s string) (Permission, error) {
	switch s {
	case "read", "write", "delete", "network", "shell", "filesystem":
		return Permission{s}, nil
	}
	name, ok := strings.CutPrefix(s, customPrefix)
	if !ok {
		return Permission{}, fmt.Errorf("%w %q (want read, write, delete, network, shell, filesystem or custom:<name>)", ErrInvalid, s)
	}
	if name == "" {
		return Permission{}, fmt.Errorf("%w %q: custom permission needs a name", ErrInvalid, s)
	}
	if len(name) > maxCustomName {
		return Permission{}, fmt.Errorf("%w %q: custom name longer than %d bytes", ErrInvalid, s[:32]+"...", maxCustomName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' || r == ':') {
			return Permission{}, fmt.Errorf("%w %q: custom name may contain only letters, digits, '_', '-', '.' and ':'", ErrInvalid, s)
		}
	}
	return Permission{s}, nil
}

// MustParse is like Parse but panics on error. It is meant for constants in
// programs and tests, not for input.
func MustParse(s string) Permission {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}

// ParseList parses each string with Parse and returns the first error.
func ParseList(ss []string) ([]Permission, error) {
	out := make([]Permission, 0, len(ss))
	for _, s := range ss {
		p, err := Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// String returns the permission's text form, or "" for the zero value.
func (p Permission) String() string { return p.name }

// IsZero reports whether p is the zero (invalid) Permission.
func (p Permission) IsZero() bool { return p.name == "" }

// IsCustom reports whether p is a custom permission.
func (p Permission) IsCustom() bool { return strings.HasPrefix(p.name, customPrefix) }

// MarshalText implements encoding.TextMarshaler. The zero value is an error.
func (p Permission) MarshalText() ([]byte, error) {
	if p.name == "" {
		return nil, fmt.Errorf("%w: zero value", ErrInvalid)
	}
	return []byte(p.name), nil
}

// UnmarshalText implements encoding.TextUnmarshaler using Parse.
func (p *Permission) UnmarshalText(b []byte) error {
	q, err := Parse(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Strings returns the text forms of ps.
func Strings(ps []Permission) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
