package registry_test

import (
	"encoding/json"
	"testing"

	"github.com/agcore/agrun/registry"
)

func TestMountMode(t *testing.T) {
	for _, c := range []struct {
		w, d bool
		want registry.MountMode
		text string
	}{{false, false, registry.ReadOnly, "ro"}, {true, false, registry.ReadWrite, "rw"}, {true, true, registry.ReadWriteDelete, "rwd"}, {false, true, registry.ReadWriteDelete, "rwd"}} {
		m := registry.MountModeOf(c.w, c.d)
		if m != c.want || m.String() != c.text {
			t.Errorf("MountModeOf(%v, %v) = %v", c.w, c.d, m)
		}
		back, err := registry.ParseMountMode(c.text)
		if err != nil || back != m || back.Writable() != (m != registry.ReadOnly) || back.Delete() != (m == registry.ReadWriteDelete) {
			t.Errorf("ParseMountMode(%q) = %v, %v", c.text, back, err)
		}
	}
	if _, err := registry.ParseMountMode("wr"); err == nil {
		t.Error(`"wr" was taken`)
	}
	b, _ := json.Marshal(registry.GrantMount{Guest: "/g", Host: "/h", Mode: registry.ReadWrite})
	var g registry.GrantMount
	if string(b) != `{"guest":"/g","host":"/h","mode":"rw"}` || json.Unmarshal(b, &g) != nil || g.Mode != registry.ReadWrite {
		t.Errorf("JSON %s, back %+v", b, g)
	}
}
