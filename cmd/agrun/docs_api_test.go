package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/mddoc"
)

// TestAPIExamples runs docs/API.md's examples, top to bottom, against
// `agrun serve` started as its first block says (on a free loopback port
// in place of 0.0.0.0:8080) from the shipped agrun.toml (shippedConfig)
// with a bearer token: every curl line, translated to a net/http request
// (its -X, -H, -d, --data-binary, -w and $A; the Host curl would send),
// and every other command of its sh blocks with sh (agrun pack, sed,
// printf, head). A curl's answer is compared with the "# STATUS BODY"
// line under it — the status, "ok", the error's kind, its message up to
// the document's first "…", and every key the document shows — or, for
// an upload and a run, with the JSON and the event stream shown after it.
// GET /v1/usage is compared field by field (checkUsage).
func TestAPIExamples(t *testing.T) {
	t.Parallel()
	doc := mddoc.Read(t, "docs/API.md")
	model := chattest.New(t,
		chattest.Reply{ToolCalls: []chattest.Call{{ID: "call_1", Name: "word_count", Args: `{"text":"one two three"}`}}},
		chattest.Reply{Text: "There are 3 words."})
	dir := t.TempDir()
	shippedConfig(t, dir, model.URL)
	if err := os.Symlink(filepath.Join(repoRoot(t), "runtime"), filepath.Join(dir, "runtime")); err != nil {
		t.Fatal(err)
	}
	const token = "docs-test-token-0123456789"
	sh := newDocShell(t, dir, userEnv(dir)...)

	// The serving block: export the tokens, then serve.
	first := mddoc.ShellCmds(doc.Blocks("sh")[0])
	if len(first) != 2 || !strings.HasPrefix(first[0].Line, "export AGRUN_TOKENS=") || !strings.Contains(first[1].Line, " serve ") || len(first[1].Want) != 1 {
		t.Fatalf("the first block: want export AGRUN_TOKENS, agrun serve and its line; have %+v", first)
	}
	base, stop := startDocServe(t, sh, regexp.MustCompile(`--addr \S+`).ReplaceAllString(first[1].Line, "--addr 127.0.0.1:0"), token, first[1].Want[0])
	defer stop()
	port := base[strings.LastIndexByte(base, ':')+1:]

	c := &curlRunner{t: t, sh: sh, base: base, host: "localhost:" + port, token: token, client: &http.Client{Timeout: 60 * time.Second}}
	ran := 0
	for _, b := range doc.Blocks("sh")[1:] {
		for _, cmd := range mddoc.ShellCmds(b) {
			if !strings.Contains(cmd.Line, "curl ") {
				sh.must(cmd.Line)
				continue
			}
			ran++
			t.Run(cmd.Line, func(t *testing.T) { c.t = t; c.check(doc, cmd) })
		}
	}
	if ran < 15 {
		t.Errorf("only %d curl examples found in docs/API.md", ran)
	}
}

// startDocServe starts the serve command line with sh and waits for its
// serving line, which must match the document's (want) in the tool
// count and the auth part. It returns the base URL and the function that
// stops the server with SIGTERM (and fails the test unless it exits 0).
func startDocServe(t *testing.T, sh *docShell, line, token, want string) (string, func()) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Dir, cmd.Env = sh.dir, append(append([]string{}, sh.env...), "AGRUN_TOKENS="+token)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving on ") {
				lines <- sc.Text()
				io.Copy(io.Discard, stderr)
				return
			}
		}
		close(lines)
	}()
	var got string
	select {
	case got = <-lines:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("agrun serve: no serving line within 60 s")
	}
	if got == "" {
		cmd.Wait()
		t.Fatal("agrun serve ended without serving")
	}
	for _, part := range []string{`\(tools: \d+`, `auth: [^)]*\)`} {
		w := regexp.MustCompile(part).FindString(want)
		if w == "" || !strings.Contains(got, w) {
			t.Errorf("serving line %q; the document shows %q (%s)", got, want, w)
		}
	}
	_, rest, _ := strings.Cut(got, "serving on ")
	base, _, _ := strings.Cut(rest, " ")
	return base, func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("agrun serve after SIGTERM: %v", err)
		}
	}
}

// curlRunner runs the document's curl lines against one server.
type curlRunner struct {
	t           *testing.T
	sh          *docShell
	base, host  string // the server's URL; the Host curl sends (localhost:PORT)
	token       string
	client      *http.Client
	docSession  string // the session id of the document's run example
	realSession string // the run's, in its place
	// offline: get_weather's call failed for want of Internet access
	// (the document's caveat), one failed call more than it shows.
	offline bool
}

// check runs cmd's curl and compares its answer with the document's.
func (c *curlRunner) check(doc mddoc.Doc, cmd mddoc.ShellCmd) {
	t := c.t
	t.Helper()
	line := cmd.Line
	if c.docSession != "" {
		line = strings.ReplaceAll(line, c.docSession, c.realSession)
	}
	var stdin []byte
	if left, right, ok := strings.Cut(line, " | curl "); ok {
		stdin = []byte(c.sh.must(left).stdout)
		line = "curl " + right
	}
	req, writeOut := c.request(mddoc.ShellWords(line), stdin)
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := strings.Join(cmd.Want, "\n")
	if c.docSession != "" {
		want = strings.ReplaceAll(want, c.docSession, c.realSession)
	}
	switch {
	case writeOut:
		if want != strconv.Itoa(resp.StatusCode) {
			t.Errorf("status %d; the document shows %q (body %s)", resp.StatusCode, want, body)
		}
	case strings.HasSuffix(req.URL.Path, "/v1/runs"):
		c.checkRun(doc, resp, body)
	case want == "" && req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/v1/tools") && resp.StatusCode == http.StatusCreated:
		// The upload's answer is the JSON block after it, with Location.
		sec := doc.Section(t, "### POST /v1/tools — upload a tool")
		loc := regexp.MustCompile("`Location: ([^`]+)`").FindStringSubmatch(sec.Text)
		if loc == nil || resp.Header.Get("Location") != loc[1] {
			t.Errorf("Location %q; the document says %v", resp.Header.Get("Location"), loc)
		}
		compareShape(t, sec.Blocks("json")[0], body)
	case want == "":
		if resp.StatusCode/100 != 2 {
			t.Errorf("status %d (%s); the document shows no failure", resp.StatusCode, body)
		}
	default:
		status, shape, _ := strings.Cut(want, " ")
		if n, err := strconv.Atoi(status); err == nil {
			if resp.StatusCode != n {
				t.Errorf("status %d, body %s; the document shows %s", resp.StatusCode, body, want)
			}
		} else {
			shape = want // no status shown: the body only
		}
		if strings.Contains(req.URL.Path, "/get_weather/") && bytes.Contains(body, []byte(`"kind":"execution_failed"`)) {
			// The document's own caveat: without Internet access the
			// call runs and fails (200, execution_failed).
			c.offline = true
			return
		}
		compareShape(t, shape, body)
		if strings.HasSuffix(req.URL.Path, "/v1/usage") {
			c.checkUsage(shape, body)
		}
	}
}

// checkUsage compares GET /v1/usage's answer with the one the document
// shows: the same fields (a field the server adds must be documented),
// each with the value shown — the examples above made exactly the calls
// and the run it counts —, but for what the clock and the sandbox
// measure (since, cpu_seconds, fuel), which need only be there, and the
// failed call more when get_weather found no Internet access.
func (c *curlRunner) checkUsage(shown string, body []byte) {
	t := c.t
	t.Helper()
	var want, got map[string]any
	if err := json.Unmarshal([]byte(shown), &want); err != nil {
		t.Fatalf("the document's usage is not JSON (show every field, no …): %v\n%s", err, shown)
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return // compareShape said so
	}
	if n, ok := want["failed_calls"].(float64); ok && c.offline {
		want["failed_calls"] = n + 1
	}
	if w, g := sortedKeys(want), sortedKeys(got); !slices.Equal(w, g) {
		t.Errorf("usage fields %v; the document shows %v", g, w)
	}
	for _, k := range sortedKeys(want) {
		switch k {
		case "since":
			since, err := time.Parse(time.RFC3339, fmt.Sprint(got[k]))
			if err != nil || since.After(time.Now()) {
				t.Errorf("since %v: want when the server started (%v)", got[k], err)
			}
		case "cpu_seconds", "fuel":
			if n, ok := got[k].(float64); !ok || n < 0 {
				t.Errorf("%s %v: want a number, at least 0", k, got[k])
			}
		default:
			if !reflect.DeepEqual(got[k], want[k]) {
				t.Errorf("usage %s %v; the document shows %v\ngot: %s", k, got[k], want[k], body)
			}
		}
	}
}

// request translates curl's words into a request; writeOut is -w's
// '%{http_code}' (the answer is the status).
func (c *curlRunner) request(words []string, stdin []byte) (req *http.Request, writeOut bool) {
	t := c.t
	t.Helper()
	method, url := "", ""
	var body []byte
	hasBody := false
	h := http.Header{}
	for i := 1; i < len(words); i++ {
		w := words[i]
		next := func() string {
			i++
			if i >= len(words) {
				t.Fatalf("curl: %s needs a value", w)
			}
			return words[i]
		}
		switch {
		case w == "-s" || w == "-sN" || w == "-N":
		case w == "$A":
			h.Set("Authorization", "Bearer "+c.token)
		case w == "-H":
			k, v, _ := strings.Cut(next(), ":")
			h.Set(k, strings.TrimSpace(v))
		case w == "-X":
			method = next()
		case w == "-w":
			if next() != `%{http_code}\n` {
				t.Fatalf("curl -w: only %%{http_code} is translated")
			}
			writeOut = true
		case w == "-d" || w == "--data-binary":
			d := next()
			hasBody = true
			switch {
			case d == "@-":
				body = stdin
			case strings.HasPrefix(d, "@"):
				b, err := os.ReadFile(filepath.Join(c.sh.dir, d[1:]))
				if err != nil {
					t.Fatal(err)
				}
				body = b
			default:
				body = []byte(d)
			}
		case strings.HasPrefix(w, "-"):
			t.Fatalf("curl option %s is not translated: teach TestAPIExamples", w)
		default:
			if !strings.HasPrefix(w, "localhost:8080/") {
				t.Fatalf("curl URL %q is not on localhost:8080", w)
			}
			url = c.base + strings.TrimPrefix(w, "localhost:8080")
		}
	}
	if method == "" {
		method = http.MethodGet
		if hasBody {
			method = http.MethodPost
		}
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if hasBody && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/x-www-form-urlencoded") // what curl -d sends
	}
	req.Header = h
	req.Host = c.host
	if hv := h.Get("Host"); hv != "" {
		req.Host = hv
	}
	return req, writeOut
}

// checkRun compares a run's event stream with the one the document shows
// after its curl: the same events in the same order, each with the keys
// the document shows. The session id then stands for the document's.
func (c *curlRunner) checkRun(doc mddoc.Doc, resp *http.Response, body []byte) {
	t := c.t
	t.Helper()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("run: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var shown string
	for _, b := range doc.Section(t, "### POST /v1/runs — an agent run, streamed").Blocks("") {
		if strings.HasPrefix(b, "event: started") {
			shown = b
		}
	}
	if shown == "" {
		t.Fatal("no event stream shown after the run's curl")
	}
	// A reply streams as many text_deltas as it likes: a run of them
	// stands for the one the document shows.
	events := func(s string) (types, data []string) {
		for _, l := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(l, "event: "); ok {
				types = append(types, v)
			} else if v, ok := strings.CutPrefix(l, "data: "); ok {
				if n := len(types); n > 1 && types[n-1] == "text_delta" && types[n-2] == "text_delta" {
					types = types[:n-1]
					continue
				}
				data = append(data, v)
			}
		}
		return types, data
	}
	wantTypes, wantData := events(shown)
	gotTypes, gotData := events(string(body))
	if strings.Join(gotTypes, " ") != strings.Join(wantTypes, " ") || len(gotData) != len(wantData) {
		t.Fatalf("events %v; the document shows %v\n%s", gotTypes, wantTypes, body)
	}
	for i := range wantData {
		compareShape(t, wantData[i], []byte(gotData[i]))
	}
	var started struct{ Session string }
	json.Unmarshal([]byte(gotData[0]), &started)
	json.Unmarshal([]byte(wantData[0]), &struct{ Session *string }{&c.docSession})
	c.realSession = started.Session
	if c.docSession == "" || c.realSession == "" {
		t.Fatalf("no session in the started events: %s / %s", wantData[0], gotData[0])
	}
}

// compareShape compares an answer with the one the document shows, which
// stands for parts with "…": the answer must be JSON with "ok" and the
// error's kind as shown, the error's message as shown up to its first
// "…", and every key the document shows, somewhere.
func compareShape(t *testing.T, want string, got []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Errorf("the answer is not JSON: %v\n%s", err, got)
		return
	}
	keys := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				keys[k] = true
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	for _, m := range regexp.MustCompile(`"(\w+)":`).FindAllStringSubmatch(want, -1) {
		if !keys[m[1]] {
			t.Errorf("the answer has no %q; the document shows %s\ngot: %s", m[1], want, got)
		}
	}
	obj, _ := v.(map[string]any)
	if m := regexp.MustCompile(`^\{"ok":(true|false)`).FindStringSubmatch(want); m != nil && fmt.Sprint(obj["ok"]) != m[1] {
		t.Errorf("ok %v; the document shows %s\ngot: %s", obj["ok"], want, got)
	}
	errObj, _ := obj["error"].(map[string]any)
	if m := regexp.MustCompile(`"kind":"(\w+)"`).FindStringSubmatch(want); m != nil && strings.HasPrefix(want, `{"ok":false`) && errObj["kind"] != m[1] {
		t.Errorf("kind %v; the document shows %s\ngot: %s", errObj["kind"], want, got)
	}
	if m := regexp.MustCompile(`"message":"((?:[^"\\]|\\.)*)"`).FindStringSubmatch(want); m != nil && errObj != nil {
		var msg string
		json.Unmarshal([]byte(`"`+m[1]+`"`), &msg)
		prefix, _, cut := strings.Cut(msg, "…")
		gotMsg := fmt.Sprint(errObj["message"])
		if (cut && !strings.HasPrefix(gotMsg, strings.TrimRight(prefix, " "))) || (!cut && gotMsg != msg) {
			t.Errorf("message %q; the document shows %q", gotMsg, msg)
		}
	}
}
