package permission

import (
	"errors"
	"fmt"
	"testing"
)

func ps(ss ...string) []Permission {
	out := make([]Permission, len(ss))
	for i, s := range ss {
		out[i] = MustParse(s)
	}
	return out
}

func TestCheck(t *testing.T) {
	def := DefaultConfig()
	for _, tc := range []struct {
		name     string
		cfg      Config
		perms    []Permission
		wantPerm string // "" = allowed
		wantRule Rule
	}{
		{name: "default allows read", cfg: def, perms: ps("read")},
		{name: "default allows read+network", cfg: def, perms: ps("read", "network")},
		{name: "default denies delete by deny-list", cfg: def, perms: ps("read", "delete"), wantPerm: "delete", wantRule: RuleDenyList},
		{name: "default denies shell by deny-list", cfg: def, perms: ps("shell"), wantPerm: "shell", wantRule: RuleDenyList},
		{name: "default denies filesystem: not in allow-list", cfg: def, perms: ps("filesystem", "read"), wantPerm: "filesystem", wantRule: RuleNotAllowed},
		{name: "default allows a tool declaring nothing", cfg: def, perms: nil},
		{name: "first denied permission is reported", cfg: def, perms: ps("read", "write", "shell"), wantPerm: "write", wantRule: RuleNotAllowed},

		{name: "allow-list mode allows listed", cfg: Config{Allowed: ps("write")}, perms: ps("write")},
		{name: "allow-list mode denies unlisted even with AllowUnspecified", cfg: Config{Allowed: ps("write"), AllowUnspecified: true}, perms: ps("read"), wantPerm: "read", wantRule: RuleNotAllowed},
		{name: "deny-list beats allow-list", cfg: Config{Allowed: ps("network"), Denied: ps("network")}, perms: ps("network"), wantPerm: "network", wantRule: RuleDenyList},

		{name: "both empty, unspecified allowed", cfg: Config{AllowUnspecified: true}, perms: ps("shell", "delete")},
		{name: "both empty, unspecified denied", cfg: Config{}, perms: ps("read"), wantPerm: "read", wantRule: RuleUnspecified},
		{name: "deny-only list, others fall to unspecified=true", cfg: Config{Denied: ps("shell"), AllowUnspecified: true}, perms: ps("write")},
		{name: "deny-only list, others fall to unspecified=false", cfg: Config{Denied: ps("shell")}, perms: ps("write"), wantPerm: "write", wantRule: RuleUnspecified},
		{name: "no permissions declared, unspecified false", cfg: Config{Allowed: ps("read")}, perms: nil, wantRule: RuleUnspecified},
		{name: "no permissions declared (empty slice), unspecified false", cfg: Config{}, perms: []Permission{}, wantRule: RuleUnspecified},

		{name: "custom allowed", cfg: Config{Allowed: ps("custom:db")}, perms: ps("custom:db")},
		{name: "custom denied", cfg: Config{Allowed: ps("custom:db"), Denied: ps("custom:pay")}, perms: ps("custom:pay"), wantPerm: "custom:pay", wantRule: RuleDenyList},
		{name: "custom unknown in allow-list mode", cfg: Config{Allowed: ps("custom:db")}, perms: ps("custom:other"), wantPerm: "custom:other", wantRule: RuleNotAllowed},
		{name: "custom unknown, lists empty, unspecified true", cfg: Config{AllowUnspecified: true}, perms: ps("custom:other")},
		{name: "custom names are exact, not prefixes", cfg: Config{Allowed: ps("custom:db")}, perms: ps("custom:db.admin"), wantPerm: "custom:db.admin", wantRule: RuleNotAllowed},

		{name: "duplicate entries in lists", cfg: Config{Allowed: ps("read", "read"), Denied: ps("shell", "shell")}, perms: ps("read", "read")},
		{name: "duplicate entries, deny still wins", cfg: Config{Allowed: ps("shell", "shell"), Denied: ps("shell", "shell")}, perms: ps("shell"), wantPerm: "shell", wantRule: RuleDenyList},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NewChecker(tc.cfg).Check("tool_x", tc.perms)
			if tc.wantPerm == "" && tc.wantRule == "" {
				if err != nil {
					t.Fatalf("Check = %v, want allowed", err)
				}
				return
			}
			var de *DeniedError
			if !errors.As(err, &de) || !errors.Is(err, ErrDenied) {
				t.Fatalf("Check = %v, want *DeniedError", err)
			}
			if de.Tool != "tool_x" || de.Permission.String() != tc.wantPerm || de.Rule != tc.wantRule {
				t.Fatalf("denied %+v, want perm %q rule %q", de, tc.wantPerm, tc.wantRule)
			}
		})
	}
}

func TestDeniedErrorMessage(t *testing.T) {
	err := NewChecker(DefaultConfig()).Check("rm_rf", ps("delete"))
	want := `permission denied: tool "rm_rf" needs "delete", which the policy denies (deny-list)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	err = NewChecker(Config{}).Check("bare", nil)
	if err == nil || err.Error() != `permission denied: tool "bare" declares no permissions and the policy does not allow unspecified tools` {
		t.Fatalf("got %v", err)
	}
}

func TestCheckerCopiesConfig(t *testing.T) {
	cfg := Config{Allowed: ps("read")}
	c := NewChecker(cfg)
	cfg.Allowed[0] = Shell
	if err := c.Check("t", ps("read")); err != nil {
		t.Fatalf("changing the Config after NewChecker changed the Checker: %v", err)
	}
}

func TestNilCheckerAllows(t *testing.T) {
	var c *Checker
	if err := c.Check("t", ps("shell")); err != nil {
		t.Fatal(err)
	}
}

func ExampleChecker_Check() {
	c := NewChecker(DefaultConfig())
	fmt.Println(c.Check("word_count", nil))
	fmt.Println(c.Check("get_weather", []Permission{Network}))
	fmt.Println(c.Check("read_file", []Permission{Filesystem, Read}))
	fmt.Println(c.Check("cleanup", []Permission{Delete}))
	// Output:
	// <nil>
	// <nil>
	// permission denied: tool "read_file" needs "filesystem", which the policy denies (not in allow-list)
	// permission denied: tool "cleanup" needs "delete", which the policy denies (deny-list)
}
