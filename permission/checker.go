package permission

import (
	"errors"
	"fmt"
)

// Config is a permission policy. The zero value allows nothing that is
// declared and denies tools that declare nothing; use DefaultConfig for the
// documented defaults.
type Config struct {
	// Allowed lists permissions that may be used. When non-empty the policy
	// is in allow-list mode: a permission not listed is denied.
	Allowed []Permission `json:"allowed" toml:"allowed"`
	// Denied lists permissions that are always denied; it takes precedence
	// over Allowed.
	Denied []Permission `json:"denied" toml:"denied"`
	// AllowUnspecified decides permissions when Allowed is empty, and
	// whether a tool that declares no permissions may run.
	AllowUnspecified bool `json:"allow_unspecified" toml:"allow_unspecified"`
}

// DefaultConfig returns the default policy: allow read and network, deny
// delete and shell, and allow tools that declare nothing.
func DefaultConfig() Config {
	return Config{
		Allowed:          []Permission{Read, Network},
		Denied:           []Permission{Delete, Shell},
		AllowUnspecified: true,
	}
}

// Rule names the rule that denied a permission.
type Rule string

// The rules a denial can come from.
const (
	// RuleDenyList: the permission is in Config.Denied.
	RuleDenyList Rule = "deny-list"
	// RuleNotAllowed: Config.Allowed is non-empty and does not list the permission.
	RuleNotAllowed Rule = "not in allow-list"
	// RuleUnspecified: Config.Allowed is empty and AllowUnspecified is false,
	// or the tool declares no permissions and AllowUnspecified is false.
	RuleUnspecified Rule = "unspecified"
)

// ErrDenied is matched (errors.Is) by every *DeniedError.
var ErrDenied = errors.New("permission denied")

// DeniedError reports that a tool may not run under the policy.
type DeniedError struct {
	Tool       string     // the tool that was refused
	Permission Permission // the first denied permission; zero when the tool declares none
	Rule       Rule       // which rule denied it
}

// Error implements error.
func (e *DeniedError) Error() string {
	if e.Permission.IsZero() {
		return fmt.Sprintf("permission denied: tool %q declares no permissions and the policy does not allow unspecified tools", e.Tool)
	}
	return fmt.Sprintf("permission denied: tool %q needs %q, which the policy denies (%s)", e.Tool, e.Permission, e.Rule)
}

// Is reports whether target is ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Checker applies a Config. It is immutable and safe for concurrent use.
type Checker struct {
	allowed          map[Permission]bool
	denied           map[Permission]bool
	allowUnspecified bool
}

// NewChecker returns a Checker for cfg. The lists are copied; later changes
// to cfg do not affect the Checker. Duplicate entries are harmless.
func NewChecker(cfg Config) *Checker {
	c := &Checker{
		allowed:          make(map[Permission]bool, len(cfg.Allowed)),
		denied:           make(map[Permission]bool, len(cfg.Denied)),
		allowUnspecified: cfg.AllowUnspecified,
	}
	for _, p := range cfg.Allowed {
		c.allowed[p] = true
	}
	for _, p := range cfg.Denied {
		c.denied[p] = true
	}
	return c
}

// Allows reports whether the policy allows p, and if not, the rule that
// denies it.
func (c *Checker) Allows(p Permission) (bool, Rule) {
	switch {
	case c.denied[p]:
		return false, RuleDenyList
	case c.allowed[p]:
		return true, ""
	case len(c.allowed) > 0:
		return false, RuleNotAllowed
	case c.allowUnspecified:
		return true, ""
	default:
		return false, RuleUnspecified
	}
}

// Check returns nil if a tool declaring perms may run, or a *DeniedError
// naming the tool, the first denied permission in perms' order, and the rule
// that denied it. A tool declaring no permissions may run only if the
// Config's AllowUnspecified is true. A nil Checker allows everything.
func (c *Checker) Check(tool string, perms []Permission) error {
	if c == nil {
		return nil
	}
	if len(perms) == 0 {
		if c.allowUnspecified {
			return nil
		}
		return &DeniedError{Tool: tool, Rule: RuleUnspecified}
	}
	for _, p := range perms {
		if ok, rule := c.Allows(p); !ok {
			return &DeniedError{Tool: tool, Permission: p, Rule: rule}
		}
	}
	return nil
}
