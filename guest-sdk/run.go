package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// Text is a result written to stdout as is, without JSON encoding. Return it
// from a tool whose manifest says output = "text"; the host hands the text to
// the model as a JSON string.
type Text string

// Run runs one tool call: it decodes the JSON object on stdin into an In,
// calls fn, and writes the result to stdout as JSON (or verbatim if Out is
// [Text]), then exits 0.
//
// If the arguments do not decode, or fn returns an error or panics, Run
// writes {"error":"<message>"} to stdout and the message to stderr, and exits
// with status 1; the host passes the message to the model. Empty stdin
// decodes as the zero In. Run never returns.
//
// Call Run from main's goroutine. In a reactor build (-buildmode=c-shared)
// a successful Run ends the call by unwinding main back to agrun_call
// rather than exiting, so main's deferred functions run (os.Exit would
// skip them) and must not write to stdout.
func Run[In, Out any](fn func(ctx context.Context, in In) (Out, error)) {
	exit(run(context.Background(), os.Stdin, os.Stdout, os.Stderr, fn))
}

// run is Run without the process: it returns the exit status.
func run[In, Out any](ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, fn func(context.Context, In) (Out, error)) (code int) {
	var in In
	data, err := io.ReadAll(stdin)
	if err != nil {
		return fail(stdout, stderr, fmt.Errorf("reading arguments: %w", err))
	}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &in); err != nil {
			return fail(stdout, stderr, fmt.Errorf("invalid arguments: %w", err))
		}
	}
	out, err := call(ctx, fn, in)
	if err != nil {
		return fail(stdout, stderr, err)
	}
	if t, ok := any(out).(Text); ok {
		if _, err := io.WriteString(stdout, string(t)); err != nil {
			return fail(io.Discard, stderr, fmt.Errorf("writing result: %w", err))
		}
		return 0
	}
	b, err := marshal(out)
	if err != nil {
		return fail(stdout, stderr, fmt.Errorf("encoding result: %w", err))
	}
	if _, err := stdout.Write(b); err != nil {
		return fail(io.Discard, stderr, fmt.Errorf("writing result: %w", err))
	}
	return 0
}

// call runs fn, turning a panic into an error so that the model gets a
// message rather than a bare exit status.
func call[In, Out any](ctx context.Context, fn func(context.Context, In) (Out, error), in In) (out Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return fn(ctx, in)
}

type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("tool panicked: %v", p.value) }

// marshal encodes v as one line of JSON without HTML escaping.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fail reports err in the ABI's form and returns the exit status.
func fail(stdout, stderr io.Writer, err error) int {
	msg := err.Error()
	if strings.TrimSpace(msg) == "" {
		msg = "tool failed"
	}
	b, merr := marshal(struct {
		Error string `json:"error"`
	}{msg})
	if merr == nil {
		stdout.Write(b)
	}
	fmt.Fprintln(stderr, msg)
	var p *panicError
	if errors.As(err, &p) {
		stderr.Write(p.stack)
	}
	return 1
}
