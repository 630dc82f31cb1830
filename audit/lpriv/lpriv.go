// Package lpriv computes least privilege: from the audits of a tool's
// recorded calls (audit.Call, alias registry.Audit: what the sandbox saw
// it do) and the grant it has (registry.Grant, the one plain-data shape of
// a tool's effective grant), what it never used and a smaller grant that
// would still have let every recorded call do what it did.
//
//	rep := lpriv.Analyze("read_file", "tools/read_file.wasm", grant, observations)
//	fmt.Print(rep.TOML) // a [tools.read_file] block to paste
//
// A suggestion is only as good as the calls it has seen: a mount or host a
// tool uses rarely may be missing from the record. Analyze never suggests
// more than the grant gives; where a call was refused something (a write
// on a read-only mount, a host not allowed) or hit a limit, it says so in
// Notes instead of widening the grant.
package lpriv

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agcore/agrun/registry"
)

// Observation is one recorded call of the tool.
type Observation struct {
	Time     time.Time
	Duration time.Duration
	// Kind is the call's error kind ("" when it succeeded).
	Kind  registry.Kind
	Audit *registry.Audit // nil: not recorded (the call did not run)
}

// Report is what Analyze found for one tool.
type Report struct {
	Tool string `json:"tool"`
	// Wasm is the tool's wasm key in agrun.toml, as Analyze was given it
	// (kept in TOML).
	Wasm string `json:"wasm,omitempty"`
	// OCI is the tool's oci key instead, when Analyze was given its
	// source as "oci:REF" (kept in TOML).
	OCI    string     `json:"oci,omitempty"`
	Calls  int        `json:"calls"`  // observations
	Failed int        `json:"failed"` // of them, with an error kind
	First  time.Time  `json:"first"`
	Last   time.Time  `json:"last"`
	Mounts []MountUse `json:"mounts"`
	Hosts  []HostUse  `json:"hosts"`
	// Tried are hosts the tool asked for and was refused (not in its
	// allowed_hosts, or network not granted).
	Tried   []string `json:"tried,omitempty"`
	Memory  Limit    `json:"memory"`
	Timeout Limit    `json:"timeout"`
	Output  Limit    `json:"max_output"`
	Notes   []string `json:"notes,omitempty"`
	// Suggested is the smaller grant, and TOML its [tools.NAME] block.
	Suggested registry.Grant `json:"suggested"`
	TOML      string         `json:"toml"`
}

// MountUse is how the recorded calls used one mount.
type MountUse struct {
	registry.GrantMount
	Calls   int   `json:"calls"` // calls that touched it
	Read    bool  `json:"read"`
	Wrote   bool  `json:"wrote"` // wrote, created, truncated or renamed
	Deleted bool  `json:"deleted"`
	Refused int64 `json:"refused"`
	// Suggest is the mode to grant ("ro", "rw", "rwd"), or "" to drop the
	// mount.
	Suggest string `json:"suggest"`
}

// HostUse is how the recorded calls used one allowed host.
type HostUse struct {
	Host     string `json:"host"`
	Requests int    `json:"requests"`
	Keep     bool   `json:"keep"`
}

// Limit is a limit against the largest value observed, and the suggested
// limit (never above the current one). Values are bytes, or nanoseconds
// for the timeout.
type Limit struct {
	Current  int64 `json:"current"`
	Observed int64 `json:"observed"`
	Suggest  int64 `json:"suggest"`
	// Hit: a recorded call ended on this limit.
	Hit bool `json:"hit,omitempty"`
}

// Headroom of the suggested limits over the largest observed value.
const (
	memoryHeadroom  = 1.5
	timeoutHeadroom = 3
	outputHeadroom  = 2
	minTimeout      = time.Second
	minOutput       = 64 << 10
	mib             = 1 << 20
)

// Analyze compares g, what the tool is granted now, with what the
// observed calls did. g's limits are the effective ones (zero: not
// bounded), its mounts' Host as the block to paste should say it; its
// Mounts, AllowedHosts, AllowPrivate and limits are analysed, and the
// rest is kept as is in the suggestion. source says where agrun.toml
// takes the tool's module from, written first in the suggested block:
// its wasm key (a path), or "oci:" and its oci key (a pinned reference,
// as `agrun tools` names that source); "": not written.
func Analyze(tool, source string, g registry.Grant, obs []Observation) Report {
	return AnalyzeIn("tools", tool, source, g, obs)
}

// AnalyzeIn is Analyze for the grant of agrun.toml's [section.name]: the
// suggested block is a [section.name] block. An MCP-style plug-in's
// grant, [plugins.NAME], holds for every tool it lists: obs are the calls
// of all of them.
func AnalyzeIn(section, tool, source string, g registry.Grant, obs []Observation) Report {
	rep := Report{Tool: tool, Calls: len(obs)}
	if ref, ok := strings.CutPrefix(source, "oci:"); ok {
		rep.OCI = ref
	} else {
		rep.Wasm = source
	}
	rep.Memory.Current, rep.Timeout.Current, rep.Output.Current = g.MemoryBytes, int64(g.Timeout), g.MaxOutputBytes
	uses := make([]MountUse, len(g.Mounts))
	for i, m := range g.Mounts {
		uses[i].GrantMount = m
	}
	hostReqs := map[string]int{}
	tried := map[string]bool{}
	rep.Hosts, rep.Mounts = []HostUse{}, []MountUse{}
	for _, o := range obs {
		if !o.Time.IsZero() { // a record without a time says nothing of when
			if rep.First.IsZero() || o.Time.Before(rep.First) {
				rep.First = o.Time
			}
			rep.Last = later(rep.Last, o.Time)
		}
		if o.Kind != "" {
			rep.Failed++
		}
		switch o.Kind {
		case registry.Timeout:
			rep.Timeout.Hit = true
		case registry.MemoryLimit:
			rep.Memory.Hit = true
		case registry.OutputLimit:
			rep.Output.Hit = true
		}
		rep.Timeout.Observed = max(rep.Timeout.Observed, int64(o.Duration))
		a := o.Audit
		if a == nil {
			continue
		}
		rep.Memory.Observed = max(rep.Memory.Observed, a.MemoryPeak)
		rep.Output.Observed = max(rep.Output.Observed, a.BytesOut)
		for _, ma := range a.Mounts {
			i := slices.IndexFunc(uses, func(u MountUse) bool { return u.Guest == ma.Guest })
			if i < 0 {
				continue // a mount the tool no longer has
			}
			u := &uses[i]
			u.Refused += ma.Refused
			touched := ma.Opened > 0 || ma.ReadBytes > 0 || ma.WrittenBytes > 0 || len(ma.Paths) > 0
			if touched {
				u.Calls++
			}
			u.Read = u.Read || ma.ReadBytes > 0 || ma.Opened > 0
			u.Wrote = u.Wrote || ma.WrittenBytes > 0
			for _, p := range ma.Paths {
				for _, op := range p.Ops {
					switch op {
					case "read", "open", "list":
						u.Read = true
					case "write", "create", "truncate", "rename_from", "rename_to":
						u.Wrote = true
					case "delete":
						u.Deleted = true
					}
				}
			}
		}
		for _, q := range a.Requests {
			switch q.Error {
			case "forbidden", "not_granted":
				tried[q.Host] = true
			default:
				hostReqs[normHost(q.Host)]++
			}
		}
	}

	// The suggestion is g narrowed: what is not analysed is kept.
	s := g
	s.Permissions = slices.Clone(g.Permissions)
	s.Hints = slices.Clone(g.Hints)
	s.Mounts, s.AllowedHosts = nil, nil
	writable := false
	for i := range uses {
		u := &uses[i]
		switch {
		case u.Calls == 0 && !u.Read && !u.Wrote && !u.Deleted:
			u.Suggest = ""
		case u.Deleted && u.Mode == registry.ReadWriteDelete:
			u.Suggest = registry.ReadWriteDelete.String()
		case (u.Wrote || u.Deleted) && u.Mode != registry.ReadOnly:
			u.Suggest = registry.ReadWrite.String()
		default:
			u.Suggest = registry.ReadOnly.String()
		}
		if u.Refused > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d operation(s) refused by its mode %s; if the tool needs them, widen the mode yourself", u.Guest, u.Refused, u.Mode))
		}
		if u.Suggest != "" {
			mode, _ := registry.ParseMountMode(u.Suggest)
			s.Mounts = append(s.Mounts, registry.GrantMount{Host: u.Host, Guest: u.Guest, Mode: mode})
			writable = writable || mode.Writable()
		}
	}
	if !writable {
		s.MaxWriteBytes = 0 // no writable mount left to bound
	}
	rep.Mounts = uses
	for _, h := range g.AllowedHosts {
		n := hostReqs[normHost(h)]
		rep.Hosts = append(rep.Hosts, HostUse{Host: h, Requests: n, Keep: n > 0})
		if n > 0 {
			s.AllowedHosts = append(s.AllowedHosts, h)
		}
	}
	s.AllowPrivate = s.AllowPrivate && len(s.AllowedHosts) > 0
	for h := range tried {
		rep.Tried = append(rep.Tried, h)
	}
	slices.Sort(rep.Tried)
	if len(rep.Tried) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("requests to %s were refused (not in allowed_hosts)", strings.Join(rep.Tried, ", ")))
	}

	rep.Memory.Suggest = suggest(rep.Memory, func(v int64) int64 { return roundUp(int64(float64(v)*memoryHeadroom), mib) }, 0)
	rep.Timeout.Suggest = suggest(rep.Timeout, func(v int64) int64 { return roundUp(v*timeoutHeadroom, int64(time.Second)) }, int64(minTimeout))
	rep.Output.Suggest = suggest(rep.Output, func(v int64) int64 { return roundUp(v*outputHeadroom, 1<<10) }, minOutput)
	for _, l := range []struct {
		name string
		l    Limit
	}{{"timeout", rep.Timeout}, {"memory", rep.Memory}, {"max_output", rep.Output}} {
		if l.l.Hit {
			rep.Notes = append(rep.Notes, fmt.Sprintf("a recorded call ended on its %s limit: it is kept as is", l.name))
		}
	}
	s.MemoryBytes, s.Timeout, s.MaxOutputBytes = rep.Memory.Suggest, time.Duration(rep.Timeout.Suggest), rep.Output.Suggest
	rep.Suggested = s
	if rep.Calls == 0 {
		rep.Notes = append(rep.Notes, "no recorded calls: nothing to suggest")
		rep.Suggested = g
	}
	rep.TOML = tomlIn(section, tool, source, rep.Suggested)
	return rep
}

// suggest is the limit to grant: the current one when a call hit it or
// nothing was observed, else f(observed) but at least floor and at most
// the current limit.
func suggest(l Limit, f func(int64) int64, floor int64) int64 {
	if l.Hit || l.Observed == 0 || l.Current == 0 {
		return l.Current
	}
	return min(l.Current, max(f(l.Observed), floor))
}

func roundUp(v, unit int64) int64 { return (v + unit - 1) / unit * unit }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func normHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// TOML renders g as a [tools.NAME] block of agrun.toml: the tool's
// source (as Analyze takes it: a wasm path, or "oci:REF" for its oci
// key; "": not written), g's mounts, allowed_hosts,
// allow_private (when set) and its non-zero timeout, memory and
// max_output. The rest of g is not part of the block.
func TOML(tool, source string, g registry.Grant) string { return tomlIn("tools", tool, source, g) }

func tomlIn(section, tool, source string, g registry.Grant) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s.%s]\n", section, tool)
	if ref, ok := strings.CutPrefix(source, "oci:"); ok {
		fmt.Fprintf(&b, "oci = %q\n", ref)
	} else if source != "" {
		fmt.Fprintf(&b, "wasm = %q\n", source)
	}
	mounts := make([]string, len(g.Mounts))
	for i, m := range g.Mounts {
		mounts[i] = fmt.Sprintf("%q", m.Host+":"+m.Guest+":"+m.Mode.String())
	}
	fmt.Fprintf(&b, "mounts = [%s]\n", strings.Join(mounts, ", "))
	hosts := make([]string, len(g.AllowedHosts))
	for i, h := range g.AllowedHosts {
		hosts[i] = fmt.Sprintf("%q", h)
	}
	fmt.Fprintf(&b, "allowed_hosts = [%s]\n", strings.Join(hosts, ", "))
	if g.AllowPrivate {
		b.WriteString("allow_private = true\n")
	}
	if g.Timeout > 0 {
		fmt.Fprintf(&b, "timeout = %q\n", g.Timeout.String())
	}
	if g.MemoryBytes > 0 {
		fmt.Fprintf(&b, "memory = %q\n", size(g.MemoryBytes))
	}
	if g.MaxOutputBytes > 0 {
		fmt.Fprintf(&b, "max_output = %q\n", size(g.MaxOutputBytes))
	}
	return b.String()
}

// size renders n bytes in the config's unit syntax.
func size(n int64) string {
	switch {
	case n%mib == 0:
		return fmt.Sprintf("%dMiB", n/mib)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
