package audit_test

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/audit"
	"github.com/agcore/agrun/internal/testing/mddoc"
)

// TestJSONShapeIsStable: a Call marshals exactly as registry.Audit did
// before it became an alias of audit.Call (the lines below were printed by
// that type), so session files written before still decode, and decode
// back into what wrote them.
func TestJSONShapeIsStable(t *testing.T) {
	full := audit.Call{Source: "wasm", CPU: 812 * time.Microsecond, MemoryPeak: 2 << 20, BytesIn: 21, BytesOut: 61, StderrBytes: 3, HostCalls: 6, Fuel: 1234,
		Mounts: []audit.Mount{{Guest: "/docs", Host: "/home/me/docs", Writable: true,
			Paths:     []audit.Path{{Path: "/docs/a.md", Ops: []string{"open", "read"}, ReadBytes: 40, WrittenBytes: 2}},
			MorePaths: 1, Opened: 1, ReadBytes: 40, WrittenBytes: 2, Refused: 1}},
		Requests:     []audit.Request{{Method: "GET", Host: "api.example.com", Status: 200, Error: "timeout", Bytes: 3, Duration: time.Millisecond}},
		MoreRequests: 2}
	for _, c := range []struct {
		call audit.Call
		want string
	}{
		{full, `{"source":"wasm","cpu_ns":812000,"memory_peak":2097152,"bytes_in":21,"bytes_out":61,"stderr_bytes":3,"host_calls":6,"fuel":1234,"mounts":[{"guest":"/docs","host":"/home/me/docs","writable":true,"paths":[{"path":"/docs/a.md","ops":["open","read"],"read_bytes":40,"written_bytes":2}],"more_paths":1,"opened":1,"read_bytes":40,"written_bytes":2,"refused":1}],"requests":[{"method":"GET","host":"api.example.com","status":200,"error":"timeout","bytes":3,"duration_ns":1000000}],"more_requests":2}`},
		{audit.Call{}, `{"source":"","bytes_in":0,"bytes_out":0}`},
		{audit.Call{Mounts: []audit.Mount{{}}, Requests: []audit.Request{{}}}, `{"source":"","bytes_in":0,"bytes_out":0,"mounts":[{"guest":"","writable":false,"opened":0,"read_bytes":0,"written_bytes":0}],"requests":[{"method":"","host":"","duration_ns":0}]}`},
	} {
		b, err := json.Marshal(c.call)
		if err != nil || string(b) != c.want {
			t.Errorf("marshal: %v\n got %s\nwant %s", err, b, c.want)
			continue
		}
		var back audit.Call
		if err := json.Unmarshal([]byte(c.want), &back); err != nil {
			t.Fatal(err)
		}
		if b2, _ := json.Marshal(back); string(b2) != c.want {
			t.Errorf("round trip:\n got %s\nwant %s", b2, c.want)
		}
	}
}

// TestObservabilityNamesEveryField: docs/OBSERVABILITY.md's table of what
// is recorded names every field of a Call by its JSON name, and only
// those (it once said stdin_bytes for bytes_in and left out fuel).
func TestObservabilityNamesEveryField(t *testing.T) {
	sec := mddoc.Read(t, "docs/OBSERVABILITY.md").Section(t, "## What is recorded")
	named := map[string]bool{}
	for _, row := range regexp.MustCompile("(?m)^\\| (`[^|]*) \\|").FindAllStringSubmatch(sec.Text, -1) {
		for _, m := range regexp.MustCompile("`([a-z_]+)(?:\\[\\])?`").FindAllStringSubmatch(row[1], -1) {
			named[m[1]] = true
		}
	}
	ct := reflect.TypeOf(audit.Call{})
	fields := map[string]bool{}
	for i := 0; i < ct.NumField(); i++ {
		name, _, _ := strings.Cut(ct.Field(i).Tag.Get("json"), ",")
		fields[name] = true
		if !named[name] {
			t.Errorf("docs/OBSERVABILITY.md's table does not name %q (audit.Call.%s)", name, ct.Field(i).Name)
		}
	}
	for name := range named {
		if !fields[name] {
			t.Errorf("docs/OBSERVABILITY.md's table names %q, which audit.Call does not have", name)
		}
	}
}
