//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// variant is one contender of a comparison: call runs it once. A
// variant in another process (the Extism peer) has timed instead: it runs
// the call there, which times it, pauses settle and reports the call's
// wall time and its CPU time over the call and the pause.
type variant struct {
	name  string
	call  func() error
	timed func() (wall, cpu time.Duration, err error)
}

// once runs v once, untimed.
func (v variant) once() error {
	if v.timed != nil {
		_, _, err := v.timed()
		return err
	}
	return v.call()
}

// result is what roundRobin measured of one variant.
type result struct {
	times []time.Duration // wall time of every timed call
	cpu   time.Duration   // CPU time of the process and its waited-for children, all timed calls
}

// median is the median wall time of a call.
func (r result) median() time.Duration { return median(r.times) }

// cpuPerCall is the mean CPU time of a call.
func (r result) cpuPerCall() time.Duration {
	if len(r.times) == 0 {
		return 0
	}
	return r.cpu / time.Duration(len(r.times))
}

// roundRobin runs every variant once per round, in turn, for rounds
// rounds after warm calls each, and returns the duration of every timed
// call per variant. Interleaving spreads the machine's changing load over
// all variants alike, so their ratios stay meaningful on a busy machine.
//
// CPU time is charged to the variant whose call was running, as the
// difference of getrusage before and after; work a call leaves behind
// (garbage another call's collection pays for) is charged to whoever runs
// then, so it is a mean over many calls, not a per-call figure. A timed
// variant's CPU is its own process's (the bench's is not counted, nor is
// the peer's in the bench's other variants).
func roundRobin(vs []variant, warm, rounds int) (map[string]*result, error) {
	for _, v := range vs {
		for range warm {
			if err := v.once(); err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
		}
	}
	res := map[string]*result{}
	for _, v := range vs {
		res[v.name] = &result{}
	}
	for range rounds {
		for _, v := range vs {
			r := res[v.name]
			if v.timed != nil {
				wall, cpu, err := v.timed()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
				r.times = append(r.times, wall)
				r.cpu += cpu
				continue
			}
			start, cpu := time.Now(), cpuTime()
			if err := v.call(); err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
			r.times = append(r.times, time.Since(start))
			time.Sleep(settle)
			r.cpu += cpuTime() - cpu
		}
	}
	return res, nil
}

// settle is the pause after each timed call: an agent's tool calls are
// separated by the model's turn, and work a call leaves to the background
// (agrun preparing the next instance, a Go runtime's collector) then
// happens between calls rather than during the next variant's. The pause
// counts in the call's CPU time, so that work is charged to the variant
// that caused it, but not in its wall time.
const settle = 3 * time.Millisecond

// median returns the median of ds (the mean of the two middle values for
// an even count), or 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianFloat is median for plain numbers.
func medianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// cpuTime is the CPU time (user + system) this process and its
// waited-for children have used.
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return 0
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// rss returns the resident set size of this process in bytes, from
// /proc/self/statm (Linux).
func rss() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("reading the resident set size: %w", err)
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("unexpected /proc/self/statm: %q", b)
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, err
	}
	return pages * int64(os.Getpagesize()), nil
}

// fmtDur prints a duration with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3g s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3g ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3g µs", float64(d)/1e3)
	}
}

// fmtBytes prints a byte count in MiB or KiB.
func fmtBytes(n int64) string {
	if n >= 1<<20 || n <= -(1<<20) {
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
}
