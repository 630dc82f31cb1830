package lpriv

import (
	"strings"
	"testing"
	"time"

	"github.com/agcore/agrun/registry"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

const wasm = "testdata/notes.wasm"

func grant() registry.Grant {
	return registry.Grant{
		Source: "wasm",
		Mounts: []registry.GrantMount{
			{Host: "./docs", Guest: "/docs", Mode: registry.ReadWrite},         // only read: ro
			{Host: "./notes", Guest: "/notes", Mode: registry.ReadWriteDelete}, // written, never deleted: rw
			{Host: "./tmp", Guest: "/tmp", Mode: registry.ReadWriteDelete},     // never touched: dropped
		},
		AllowedHosts:   []string{"api.example.com", "unused.example.com"},
		AllowPrivate:   true,
		Timeout:        10 * time.Second,
		MemoryBytes:    64 << 20,
		MaxOutputBytes: 1 << 20,
		MaxWriteBytes:  8 << 20,
	}
}

func calls() []Observation {
	return []Observation{
		{Time: t0, Duration: 120 * time.Millisecond, Audit: &registry.Audit{
			Source: "wasm", MemoryPeak: 6 << 20, BytesOut: 500,
			Mounts: []registry.MountAudit{
				{Guest: "/docs", Opened: 1, ReadBytes: 100, Paths: []registry.PathAudit{{Path: "/docs/a.md", Ops: []string{"open", "read"}, ReadBytes: 100}}},
				{Guest: "/notes"},
				{Guest: "/tmp"},
			},
			Requests: []registry.RequestAudit{{Method: "GET", Host: "API.example.com", Status: 200}},
		}},
		{Time: t0.Add(time.Hour), Duration: 300 * time.Millisecond, Audit: &registry.Audit{
			Source: "wasm", MemoryPeak: 7 << 20, BytesOut: 900,
			Mounts: []registry.MountAudit{
				{Guest: "/docs", Refused: 1, Paths: []registry.PathAudit{{Path: "/docs/x", Ops: []string{"refused"}}}},
				{Guest: "/notes", Opened: 1, WrittenBytes: 5, Paths: []registry.PathAudit{{Path: "/notes/n.txt", Ops: []string{"open", "write", "create"}, WrittenBytes: 5}}},
				{Guest: "/tmp"},
			},
			Requests: []registry.RequestAudit{{Method: "GET", Host: "evil.example.com", Error: "forbidden"}},
		}},
		{Time: t0.Add(2 * time.Hour), Duration: 5 * time.Millisecond, Kind: registry.InvalidArguments},
	}
}

// TestAnalyzeSuggestsTheGrantUsed: every part of a grant against what the
// recorded calls did, and the block to paste, which agrun.toml accepts (internal/cli/setup's TestSuggestedBlockParses
// parses TOML's output back).
func TestAnalyzeSuggestsTheGrantUsed(t *testing.T) {
	rep := Analyze("notes", wasm, grant(), calls())
	if rep.Calls != 3 || rep.Failed != 1 || !rep.First.Equal(t0) || !rep.Last.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("counts: %+v", rep)
	}
	modes := map[string]string{}
	for _, m := range rep.Mounts {
		modes[m.Guest] = m.Suggest
	}
	if modes["/docs"] != "ro" || modes["/notes"] != "rw" || modes["/tmp"] != "" {
		t.Errorf("mount suggestions %v", modes)
	}
	if len(rep.Hosts) != 2 || !rep.Hosts[0].Keep || rep.Hosts[0].Requests != 1 || rep.Hosts[1].Keep {
		t.Errorf("hosts %+v", rep.Hosts)
	}
	if len(rep.Tried) != 1 || rep.Tried[0] != "evil.example.com" {
		t.Errorf("tried %v", rep.Tried)
	}
	// 7 MiB peak × 1.5 → 11 MiB; 300 ms × 3 → 1 s; 900 B × 2 → the 64 KiB floor.
	if rep.Memory.Suggest != 11<<20 || rep.Timeout.Suggest != int64(time.Second) || rep.Output.Suggest != 64<<10 {
		t.Errorf("limits: memory %d, timeout %d, output %d", rep.Memory.Suggest, rep.Timeout.Suggest, rep.Output.Suggest)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "/docs: 1 operation(s) refused") || !strings.Contains(notes, "evil.example.com") {
		t.Errorf("notes %q", notes)
	}
	if sg := rep.Suggested; sg.Source != "wasm" || !sg.AllowPrivate || sg.MaxWriteBytes != 8<<20 || sg.MemoryBytes != 11<<20 {
		t.Errorf("suggested grant %+v: want the source, allow_private and max_write kept (a host and a writable mount are)", sg)
	}
	want := `[tools.notes]
wasm = "testdata/notes.wasm"
mounts = ["./docs:/docs:ro", "./notes:/notes:rw"]
allowed_hosts = ["api.example.com"]
allow_private = true
timeout = "1s"
memory = "11MiB"
max_output = "64KiB"
`
	if rep.TOML != want {
		t.Fatalf("TOML:\n%s\nwant:\n%s", rep.TOML, want)
	}
}

// TestAnalyzeKeepsLimitsThatWereHit: a limit a call ended on is not
// shrunk, and a grant is never widened.
func TestAnalyzeKeepsLimitsThatWereHit(t *testing.T) {
	obs := []Observation{
		{Time: t0, Duration: 10 * time.Second, Kind: registry.Timeout, Audit: &registry.Audit{MemoryPeak: 64 << 20, BytesOut: 2 << 20}},
		{Time: t0, Kind: registry.MemoryLimit, Audit: &registry.Audit{MemoryPeak: 64 << 20}},
	}
	rep := Analyze("t", wasm, grant(), obs)
	if rep.Timeout.Suggest != int64(10*time.Second) || rep.Memory.Suggest != 64<<20 || rep.Output.Suggest != 1<<20 {
		t.Fatalf("limits %+v %+v %+v", rep.Timeout, rep.Memory, rep.Output)
	}
	if !rep.Timeout.Hit || !rep.Memory.Hit {
		t.Fatalf("hits not reported: %+v", rep)
	}
}

// TestAnalyzeNothingRecorded: no calls, no suggestion: the grant as is.
func TestAnalyzeNothingRecorded(t *testing.T) {
	rep := Analyze("t", wasm, grant(), nil)
	if len(rep.Suggested.Mounts) != 3 || len(rep.Suggested.AllowedHosts) != 2 || !strings.Contains(strings.Join(rep.Notes, " "), "no recorded calls") {
		t.Fatalf("%+v", rep)
	}
}

// TestAnalyzeDropsWhatGoesWithWhatIsDropped: calls that touched no mount
// and reached no host leave a suggestion without mounts or hosts, and so
// without allow_private or a write limit, which only qualified them.
func TestAnalyzeDropsWhatGoesWithWhatIsDropped(t *testing.T) {
	obs := []Observation{{Time: t0, Duration: time.Millisecond, Audit: &registry.Audit{Source: "wasm", MemoryPeak: 1 << 20, BytesOut: 10}}}
	rep := Analyze("t", "", grant(), obs)
	sg := rep.Suggested
	if len(sg.Mounts) != 0 || len(sg.AllowedHosts) != 0 || sg.AllowPrivate || sg.MaxWriteBytes != 0 {
		t.Fatalf("suggested %+v", sg)
	}
	if strings.Contains(rep.TOML, "allow_private") || strings.Contains(rep.TOML, "wasm =") || !strings.Contains(rep.TOML, "mounts = []\nallowed_hosts = []\n") {
		t.Fatalf("TOML:\n%s", rep.TOML)
	}
}

// TestAnalyzeKeepsTheOCISource: a tool from a registry ("oci:REF") keeps
// its pinned reference in the block to paste, as oci = (not wasm =), so
// that the block replaces its section whole.
func TestAnalyzeKeepsTheOCISource(t *testing.T) {
	const ref = "registry.example.com/tools/notes:1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	rep := Analyze("notes", "oci:"+ref, grant(), calls())
	if rep.OCI != ref || rep.Wasm != "" {
		t.Errorf("report's source: wasm %q, oci %q", rep.Wasm, rep.OCI)
	}
	if !strings.HasPrefix(rep.TOML, "[tools.notes]\noci = \""+ref+"\"\nmounts = ") {
		t.Fatalf("TOML:\n%s", rep.TOML)
	}
	if got := TOML("n", "", grant()); strings.Contains(got, "wasm =") || strings.Contains(got, "oci =") {
		t.Fatalf("no source, yet:\n%s", got)
	}
}
