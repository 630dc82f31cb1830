//go:build linux

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// wantRows are the measurements every run must report, by section.
var wantRows = map[string][]string{
	secGo: {"agrun (median)", "agrun, not prepared ahead (median)", "agrun, command build (median)",
		"raw wazero (median)", "native process (median)", "MCP stdio round trip (median)",
		"agrun / raw wazero", "agrun / native process", "agrun / MCP stdio round trip",
		"CPU per call: agrun / raw wazero, agrun / native"},
	secTiny:  {"agrun (median)", "raw wazero (median)", "agrun overhead over raw wazero"},
	secStart: {"agrun call, cold cache (median)", "agrun call, warm cache (median)", "warm / cold"},
	secThrough: {"1 worker(s) (median)", "2 worker(s) (median)", "4 worker(s) (median)", "2 workers / 1 worker", "4 workers / 1 worker", "CPU per call, 2 workers / 1 worker",
		"1 worker(s), DisablePrepare (median)", "2 worker(s), DisablePrepare (median)", "4 worker(s), DisablePrepare (median)",
		"2 workers / 1 worker, DisablePrepare", "4 workers / 1 worker, DisablePrepare", "CPU per call, 2 workers / 1 worker, DisablePrepare"},
	secMem:  {"guest linear memory", "raw wazero: host memory per instance", "agrun: host memory per instance"},
	secLoop: {"loop, per turn (median)", "plain net/http exchange, per turn (median)", "loop overhead per turn"},
}

// TestQuick runs the whole comparison with tiny counts and checks that it
// produces every row, each with a value, and a verdict where there is a
// target. It asserts nothing about the timings.
func TestQuick(t *testing.T) {
	cfg := quickConfig()
	cfg.Dir = filepath.Join(testguest.Dir(t), "bench")
	var progress bytes.Buffer
	cfg.Progress = &progress
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	got := map[string]Row{}
	for _, r := range rep.Rows {
		key := r.Section + " / " + r.Name
		if _, dup := got[key]; dup {
			t.Errorf("row %q reported twice", key)
		}
		got[key] = r
		if r.Value == "" {
			t.Errorf("row %q has no value", key)
		}
		if (r.Target == "") != (r.Status == "") || (r.Status != "" && r.Status != "PASS" && r.Status != "MISS") {
			t.Errorf("row %q: target %q, status %q", key, r.Target, r.Status)
		}
	}
	n := 0
	for sec, names := range wantRows {
		for _, name := range names {
			n++
			if _, ok := got[sec+" / "+name]; !ok {
				t.Errorf("missing row %q / %q", sec, name)
			}
		}
	}
	if len(rep.Rows) != n {
		t.Errorf("%d rows, want %d", len(rep.Rows), n)
	}
	targets := 0
	for _, r := range rep.Rows {
		if r.Target != "" {
			targets++
		}
	}
	if targets != 7 {
		t.Errorf("%d rows with a target, want 7 (one per target of issue 10, the throughput one both with and without DisablePrepare)", targets)
	}
	if len(rep.Notes) != 6 {
		t.Errorf("%d notes, want one per section", len(rep.Notes))
	}

	var out bytes.Buffer
	printReport(&out, rep, machineInfo(), 0)
	for _, want := range []string{"| section", "agrun / raw wazero", "PASS", "machine: "} {
		if !strings.Contains(out.String(), want) && !(want == "PASS" && strings.Contains(out.String(), "MISS")) {
			t.Errorf("printed report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFlags checks that a bad flag is a usage error (exit 2) and prints
// nothing on stdout.
func TestFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := doMain([]string{"-no-such-flag"}, &stdout, &stderr); code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout: %q", stdout.String())
	}
}
