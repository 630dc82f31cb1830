//go:build linux

// Command bench compares agrun's cost with the alternatives, side by side
// in one run on the same input, and prints medians, ratios and whether
// each target of docs/PERFORMANCE.md is met:
//
//	go run ./internal/cmd/bench            # the full comparison (a few minutes)
//	go run ./internal/cmd/bench -quick     # every row, tiny counts (a smoke test)
//	go run ./internal/cmd/bench -calls 500 # more rounds per per-call comparison
//	go run ./internal/cmd/bench -only 1b,3 # only these sections (by number)
//	go run ./internal/cmd/bench -profile cpu.out -calls 2000 && go tool pprof -top cpu.out
//	                                   # where an agrun call's time goes
//
// The variants of each comparison run round-robin (one call of each in
// turn), so a machine whose load changes during the run slows them alike
// and the ratios stay stable even when the absolute figures do not.
//
// The per-call sections and the start-up one include agrun's closest
// peer, Extism's Go SDK on the same wazero, running the same word_count
// logic as an Extism plug-in. It lives in a module of its own,
// internal/cmd/bench/peer, so that Extism is not a requirement of agrun's
// go.mod; the bench builds it and runs it as a child process that makes
// one timed call per request, so the Extism variants take their turn in
// the same rounds as the others (the peer's doc comment says why this
// rather than a nested module importing agrun).
//
// It builds what it compares (the example word_count for wasip1 and for
// the host, a go-sdk MCP server, cmd/agrun, the Extism peer and its
// plug-in) into a cache directory, by
// default the user cache dir + "/agrun-bench", with the wazero compilation
// cache beside them; a second run starts measuring at once. Run it from
// inside the module. It runs on Linux only: it reads /proc for memory and
// for the machine's description.

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	goruntime "runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	os.Exit(doMain(os.Args[1:], os.Stdout, os.Stderr))
}

func doMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "tiny counts: every row, meaningless timings (a smoke test)")
	d := defaultConfig()
	calls := fs.Int("calls", d.Calls, "timed calls per variant of the Go tool comparison (5x for the tiny tool)")
	starts := fs.Int("starts", d.Starts, "timed start-ups per variant (a cold one compiles the module)")
	rounds := fs.Int("rounds", d.Rounds, "throughput rounds per worker count")
	roundCalls := fs.Int("round-calls", d.RoundCalls, "calls per worker per throughput round")
	instances := fs.Int("instances", d.Instances, "instances held at once for the memory measurement")
	runs := fs.Int("runs", d.Runs, "loop runs (2 turns each) per variant")
	dir := fs.String("dir", "", "cache of built programs and compiled modules (default: user cache dir + /agrun-bench)")
	verbose := fs.Bool("v", false, "print progress to stderr")
	profile := fs.String("profile", "", "instead of the comparison, write a CPU profile of -calls agrun calls of word_count to this file")
	profileLarge := fs.Bool("profile-large", false, "with -profile: the calls of section 1b (20 KB of text), not section 1's")
	only := fs.String("only", "", "run only these sections, by number, comma-separated ("+strings.Join(sectionNumbers(), ", ")+")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sections, err := parseSections(*only)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	cfg := Config{Calls: *calls, Warm: d.Warm, Starts: *starts, Rounds: *rounds, RoundCalls: *roundCalls,
		Instances: *instances, Runs: *runs, Dir: *dir}
	if *quick {
		q := quickConfig()
		q.Dir = cfg.Dir
		cfg = q
	}
	cfg.Sections = sections
	if *verbose {
		cfg.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *profile != "" {
		if err := Profile(ctx, cfg, *profile, *profileLarge); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		return 0
	}
	machine := machineInfo()
	start := time.Now()
	rep, err := Run(ctx, cfg)
	if rep != nil {
		printReport(stdout, rep, machine, time.Since(start))
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

// parseSections reads -only: section numbers separated by commas, each
// one of sectionNumbers. Empty means every section.
func parseSections(only string) ([]string, error) {
	if strings.TrimSpace(only) == "" {
		return nil, nil
	}
	known := sectionNumbers()
	var ns []string
	for _, n := range strings.Split(only, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("-only: no section %q (sections: %s)", n, strings.Join(known, ", "))
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// printReport writes the table (Markdown, so it can be pasted into
// docs/PERFORMANCE.md), then the machine and how each figure was made.
func printReport(w io.Writer, rep *Report, machine string, took time.Duration) {
	fmt.Fprintf(w, "machine: %s; load after the run: %s; took %s\n\n", machine, loadAvg(), took.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| section\t measurement\t value\t target\t result\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %s\t %s\t\n", r.Section, r.Name, r.Value, r.Target, r.Status)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "- "+n)
	}
}

// machineInfo names the CPU, its count and the Go version.
func machineInfo() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d), %s %s/%s; load before: %s", cpu, goruntime.NumCPU(),
		goruntime.GOMAXPROCS(0), goruntime.Version(), goruntime.GOOS, goruntime.GOARCH, loadAvg())
}

// loadAvg is the 1, 5 and 15 minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return "?"
	}
	return string(bytes.Join(f[:3], []byte(" ")))
}
