package cluster

import (
	"context"
	"testing"

	"github.com/agcore/agrun/registry"
)

// A run's RunSettings.Tenant is a claim whoever starts the workflow makes:
// the worker gives it what its own config gives that tenant's runs
// (Activities.Tenants), and a tenant it has none of, or no tenant, gets
// the worker's Registry alone.
func TestForTenantOnlyWithinTheWorkersConfig(t *testing.T) {
	base, acme := registry.New(), registry.New()
	refreshed := ""
	a := &Activities{Registry: base, Tenants: func(name string) (*registry.Registry, func(context.Context, bool) error) {
		if name != "acme" {
			return nil, nil
		}
		return acme, func(context.Context, bool) error { refreshed = name; return nil }
	}}
	if b := a.forTenant("acme"); b.Registry != acme || b == a {
		t.Errorf("acme's run got %p, want acme's registry", b.Registry)
	} else {
		b.refresh(context.Background(), false)
		if refreshed != "acme" || a.Refresh != nil {
			t.Errorf("refresh: %q, the worker's own changed: %v", refreshed, a.Refresh != nil)
		}
	}
	for _, name := range []string{"", "globex", "acme.x"} {
		if b := a.forTenant(name); b != a {
			t.Errorf("a run claiming %q got other tools than the worker's", name)
		}
	}
	if err := (&RunSettings{Tenant: string(make([]byte, 65))}).Check(); err == nil {
		t.Error("a 65-byte tenant name passed Check")
	}
}
