package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"
)

// variant is one contender of a comparison: call runs it once.
type variant struct {
	name string
	call func() error
}

// roundRobin runs every variant once per round, in turn, for rounds
// rounds after warm calls each, and returns the duration of every timed
// call per variant. Interleaving spreads the machine's changing load over
// all variants alike, so their ratios stay meaningful on a busy machine.
func roundRobin(vs []variant, warm, rounds int) (map[string][]time.Duration, error) {
	for _, v := range vs {
		for range warm {
			if err := v.call(); err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
		}
	}
	times := map[string][]time.Duration{}
	for range rounds {
		for _, v := range vs {
			start := time.Now()
			if err := v.call(); err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
			times[v.name] = append(times[v.name], time.Since(start))
		}
	}
	return times, nil
}

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
