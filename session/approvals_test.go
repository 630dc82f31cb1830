package session_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/registry"
	"github.com/agcore/agrun/session"
)

// TestApprovals: an "always" holds for the tool and the grant it was given
// for, a wider grant is asked about again, Revoke forgets it, the file is
// 0600, and a damaged file is an error that says how to recover.
func TestApprovals(t *testing.T) {
	dir := t.TempDir()
	a := session.OpenApprovals(dir)
	narrow := registry.Grant{AllowedHosts: []string{"api.example.com"}}
	wide := registry.Grant{AllowedHosts: []string{"api.example.com", "evil.example.com"}}
	if ok, err := a.Has("fetch", narrow); ok || err != nil {
		t.Fatalf("Has on a missing file = %v, %v", ok, err)
	}
	if err := a.Add(session.StandingApproval{Tool: "fetch", Grant: narrow, By: "user"}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := a.Has("fetch", narrow); !ok {
		t.Error("the standing approval does not hold for its grant")
	}
	if ok, _ := a.Has("fetch", wide); ok {
		t.Error("the standing approval holds for a wider grant")
	}
	if ok, _ := a.Has("other", narrow); ok {
		t.Error("the standing approval holds for another tool")
	}
	if fi, err := os.Stat(a.Path()); err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(a.Path()) != dir {
		t.Errorf("file %s: %v, %v", a.Path(), fi, err)
	}
	if ok, err := a.Revoke("fetch"); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if ok, _ := a.Has("fetch", narrow); ok {
		t.Error("a revoked approval still holds")
	}
	if ok, _ := a.Revoke("fetch"); ok {
		t.Error("a second Revoke found something")
	}
	os.WriteFile(a.Path(), []byte("{not json"), 0o600)
	if _, err := a.Has("fetch", narrow); err == nil || !strings.Contains(err.Error(), "remove the file") {
		t.Errorf("a damaged file: %v", err)
	}
}
