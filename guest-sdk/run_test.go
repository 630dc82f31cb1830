package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type args struct {
	Text string `json:"text"`
}
type result struct {
	Words int    `json:"words"`
	Echo  string `json:"echo"`
}

func wordsFn(_ context.Context, in args) (result, error) {
	if in.Text == "fail" {
		return result{}, errors.New(`city "x" not found`)
	}
	if in.Text == "panic" {
		panic("boom")
	}
	return result{Words: len(strings.Fields(in.Text)), Echo: in.Text}, nil
}

func runWith(t *testing.T, stdin string, fn func(context.Context, args) (result, error)) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), strings.NewReader(stdin), &out, &errb, fn)
	return code, out.String(), errb.String()
}

func TestRun(t *testing.T) {
	tests := []struct {
		name, stdin string
		code        int
		stdout      string
		stderr      string
	}{
		{"ok", `{"text":"a b <c>"}`, 0, `{"words":3,"echo":"a b <c>"}` + "\n", ""},
		{"empty stdin is the zero value", "", 0, `{"words":0,"echo":""}` + "\n", ""},
		{"tool error", `{"text":"fail"}`, 1, `{"error":"city \"x\" not found"}` + "\n", "city \"x\" not found\n"},
		{"bad json", `{"text":`, 1, `{"error":"invalid arguments: unexpected end of JSON input"}` + "\n", "invalid arguments"},
		{"wrong type", `{"text":3}`, 1, "", "invalid arguments: json: cannot unmarshal number"},
		{"panic", `{"text":"panic"}`, 1, `{"error":"tool panicked: boom"}` + "\n", "goroutine"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runWith(t, tc.stdin, wordsFn)
			if code != tc.code {
				t.Fatalf("code %d, want %d (stdout %q, stderr %q)", code, tc.code, stdout, stderr)
			}
			if tc.stdout != "" && stdout != tc.stdout {
				t.Fatalf("stdout %q, want %q", stdout, tc.stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("stderr %q does not contain %q", stderr, tc.stderr)
			}
			if code != 0 {
				// The ABI's failure form: one JSON object with a string "error".
				var e struct{ Error string }
				if err := json.Unmarshal([]byte(stdout), &e); err != nil || e.Error == "" {
					t.Fatalf("failure stdout %q is not {\"error\":...}", stdout)
				}
			}
		})
	}
}

func TestRunText(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), strings.NewReader(`{}`), &out, &errb, func(context.Context, struct{}) (Text, error) {
		return "plain <text>\n", nil
	})
	if code != 0 || out.String() != "plain <text>\n" {
		t.Fatalf("code %d stdout %q", code, out.String())
	}
}

func TestRunEmptyErrorMessage(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), strings.NewReader(`{}`), &out, &errb, func(context.Context, struct{}) (int, error) {
		return 0, errors.New("")
	})
	if code != 1 || out.String() != `{"error":"tool failed"}`+"\n" {
		t.Fatalf("code %d stdout %q", code, out.String())
	}
}

func TestLevelString(t *testing.T) {
	for l, want := range map[Level]string{LevelDebug: "debug", LevelInfo: "info", LevelWarn: "warn", LevelError: "error", 9: "level(9)"} {
		if l.String() != want {
			t.Errorf("%d: %q", l, l.String())
		}
	}
}
