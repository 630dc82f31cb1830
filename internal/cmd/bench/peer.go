//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/agcore/agrun/internal/testing/testguest"
)

// The peer comparison: Extism's Go SDK, agrun's closest peer, runs in a
// program of its own module (internal/cmd/bench/peer, see its doc
// comment for why a separate process), so that Extism never enters
// agrun's go.mod. The bench builds it and its word_count plug-in into
// its cache directory like every other program it compares, starts it,
// and asks it for one timed call per round: its variants take their turn
// in the same round-robin as agrun's.

// peerDir is the peer module, relative to the module root.
const peerDir = "internal/cmd/bench/peer"

// The peer's variants (see the peer's doc comment).
const (
	extismFresh     = "Extism, fresh instance per call"
	extismReused    = "Extism, one instance reused"
	extismNoTimeout = "Extism reused, no timeout"
)

var peerVariants = []struct{ name, arg string }{
	{extismFresh, "fresh"}, {extismReused, "reused"}, {extismNoTimeout, "reused-no-timeout"},
}

// buildPeer builds the peer (for the host) and the plug-in (wasip1,
// -buildmode=c-shared, as the Extism Go PDK documents for the standard
// toolchain) and returns their paths. GOWORK=off: the peer is built as
// its own module whatever go.work may be around.
func (s *suite) buildPeer() (host, plugin string, err error) {
	s.progress("building the Extism peer and its word_count plug-in (%s)", peerDir)
	flags := []string{"-buildvcs=false", "-ldflags=-buildid="}
	dir := filepath.Join(s.root, peerDir)
	host, err = testguest.BuildFile(testguest.Spec{Dir: dir, Native: true, Flags: flags,
		Env: []string{"CGO_ENABLED=0", "GOWORK=off"}, Module: true, Out: s.bin})
	if err != nil {
		return "", "", err
	}
	plugin, err = testguest.BuildFile(testguest.Spec{Dir: filepath.Join(dir, "plugin"),
		Flags: append(flags, "-buildmode=c-shared"), Env: []string{"GOWORK=off"}, Out: s.bin})
	if err != nil {
		return "", "", err
	}
	return host, plugin, nil
}

// peer is a running `peer serve`.
type peer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
}

// startPeer builds and starts the peer. Its first call waits for it to
// have compiled the plug-in (from the shared compilation cache after the
// first run).
func (s *suite) startPeer() (*peer, error) {
	host, plugin, err := s.buildPeer()
	if err != nil {
		return nil, err
	}
	p := &peer{cmd: exec.Command(host, "serve", "-plugin", plugin, "-cache", s.cache)}
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the peer: %w", err)
	}
	p.out = bufio.NewScanner(stdout)
	return p, nil
}

// variants returns the peer's variants for one input, each a request
// encoded once.
func (p *peer) variants(args []byte, want string) []variant {
	var vs []variant
	for _, pv := range peerVariants {
		req := append(mustJSON(map[string]any{"variant": pv.arg, "args": json.RawMessage(args), "want": want}), '\n')
		vs = append(vs, variant{name: pv.name, timed: func() (time.Duration, time.Duration, error) { return p.call(req) }})
	}
	return vs
}

// call sends one request and returns the call's wall and CPU time as the
// peer measured them.
func (p *peer) call(req []byte) (wall, cpu time.Duration, err error) {
	if _, err := p.stdin.Write(req); err != nil {
		return 0, 0, p.failed(err)
	}
	if !p.out.Scan() {
		err := p.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, p.failed(err)
	}
	var rep struct {
		Wall  int64  `json:"wall_ns"`
		CPU   int64  `json:"cpu_ns"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(p.out.Bytes(), &rep); err != nil {
		return 0, 0, fmt.Errorf("the peer's reply: %w", err)
	}
	if rep.Error != "" {
		return 0, 0, errors.New("peer: " + rep.Error)
	}
	return time.Duration(rep.Wall), time.Duration(rep.CPU), nil
}

// failed says that the peer is gone, with what it wrote to stderr.
func (p *peer) failed(err error) error {
	p.cmd.Wait()
	return fmt.Errorf("the peer failed: %w\n%s", err, p.stderr.Bytes())
}

// close ends the peer (its stdin ends) and waits for it.
func (p *peer) close() {
	p.stdin.Close()
	p.cmd.Wait()
}

// peerOnce returns a start-up variant: a whole `peer once` process, the
// first Extism call in a new process, with the compilation cache dir()
// names (called once per run).
func (s *suite) peerOnce(host, plugin string, dir func() (string, func()), args []byte, want string) func() error {
	return func() error {
		d, done := dir()
		defer done()
		cmd := exec.CommandContext(s.ctx, host, "once", "-plugin", plugin, "-cache", d, "-args", string(args))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("peer once: %w: %s", err, stderr.Bytes())
		}
		if !bytes.Contains(out, []byte(want)) {
			return fmt.Errorf("peer once: unexpected result %q", out)
		}
		return nil
	}
}
