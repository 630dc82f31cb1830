package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const full = `# a comment
[llm]
base_url = "http://127.0.0.1:11434/v1"
model = "llama3"
api_key_env = "MY_KEY"
max_turns = 5
system = "be brief"
temperature = 0.2

[sandbox]
cache_dir = "cache"
timeout = "10s"
memory = "64MiB"
max_output = "1MiB"
max_write = "8MiB"
max_parallel = 8
no_prepare = true

[permissions]
allowed = ["read", "network", "custom:db"]
denied = ["delete", "shell"]
allow_unspecified = false

[tools.word_count]
wasm = "testdata/word_count.wasm"

[tools.get_weather]
wasm = "/abs/get_weather.wasm"
allowed_hosts = ["api.open-meteo.com", "127.0.0.1:8080"]
allow_private = false
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
timeout = "5s"

[tools.read_file]
wasm = "testdata/read_file.wasm"
mounts = ["./docs:/docs:ro", "data:/data:rwd", "/tmp/x:/x"]

[mcp.everything]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
timeout = "30s"
permissions = ["read"]
sampling = "allow"
sampling_max_tokens = 200
sampling_max_run_tokens = 5000

[mcp.remote]
url = "http://127.0.0.1:9000/mcp"
headers = { Authorization = "Bearer x" }

[sessions]
dir = "sessions"

[serve]
addr = "127.0.0.1:9090"
tokens_env = "TOKENS"
max_upload = "16MiB"

[serve.uploads]
allowed_hosts = []
`

func TestParseFull(t *testing.T) {
	dir := t.TempDir()
	c, err := Parse(filepath.Join(dir, "agrun.toml"), []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if c.LLM.Model != "llama3" || c.LLM.MaxTurns != 5 || *c.LLM.Temperature != 0.2 || c.LLM.APIKeyEnv != "MY_KEY" {
		t.Errorf("llm = %+v", c.LLM)
	}
	if c.Sandbox.Timeout.Std() != 10*time.Second || c.Sandbox.Memory != 64<<20 || c.Sandbox.MaxOutput != 1<<20 || c.Sandbox.MaxWrite != 8<<20 || c.Sandbox.CacheDir != filepath.Join(dir, "cache") || !c.Sandbox.NoPrepare {
		t.Errorf("sandbox = %+v", c.Sandbox)
	}
	pc := c.PermissionConfig()
	if len(pc.Allowed) != 3 || pc.Allowed[2].String() != "custom:db" || pc.AllowUnspecified {
		t.Errorf("permissions = %+v", pc)
	}
	wc := c.Tools["word_count"]
	if wc.Wasm != filepath.Join(dir, "testdata/word_count.wasm") {
		t.Errorf("relative wasm path not resolved: %s", wc.Wasm)
	}
	gw := c.Tools["get_weather"]
	if gw.Wasm != "/abs/get_weather.wasm" || gw.Timeout.Std() != 5*time.Second || len(gw.AllowedHosts) != 2 {
		t.Errorf("get_weather = %+v", gw)
	}
	m := c.Tools["read_file"].Mounts
	if len(m) != 3 || m[0] != (Mount{Host: filepath.Join(dir, "docs"), Guest: "/docs"}) ||
		m[1] != (Mount{Host: filepath.Join(dir, "data"), Guest: "/data", Writable: true, AllowDelete: true}) || m[2].Host != "/tmp/x" || m[2].Writable {
		t.Errorf("mounts = %+v", m)
	}
	if e := c.MCP["everything"]; e.Command != "npx" || len(e.Args) != 2 || e.Timeout.Std() != 30*time.Second || e.Permissions[0].String() != "read" ||
		e.Sampling != "allow" || e.SamplingMaxTokens != 200 || e.SamplingMaxRunTokens != 5000 {
		t.Errorf("mcp = %+v", e)
	}
	if r := c.MCP["remote"]; r.URL == "" || r.Headers["Authorization"] != "Bearer x" {
		t.Errorf("mcp remote = %+v", r)
	}
	if c.Sessions.Dir != filepath.Join(dir, "sessions") || c.Serve.Addr != "127.0.0.1:9090" || c.Serve.MaxUpload != 16<<20 {
		t.Errorf("sessions/serve = %+v %+v", c.Sessions, c.Serve)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse("agrun.toml", []byte(""))
	if err != nil {
		t.Fatal(err)
	}
	pc := c.PermissionConfig()
	if len(pc.Allowed) != 2 || len(pc.Denied) != 2 || !pc.AllowUnspecified {
		t.Errorf("default permissions = %+v", pc)
	}
	if c.LLM.MaxTurns != 10 || c.LLM.APIKeyEnv != "OPENAI_API_KEY" || c.Serve.Addr != "127.0.0.1:8080" {
		t.Errorf("defaults = %+v %+v", c.LLM, c.Serve)
	}
	if c.LLM.StreamIdleTimeout != 0 || c.LLM.MaxRetryWait != 0 || c.LLM.MaxTotalTokens != 0 || c.LLM.MaxToolCalls != 0 {
		t.Errorf("request defaults = %+v", c.LLM)
	}
	c, err = Parse("agrun.toml", []byte("[llm]\nstream_idle_timeout = \"5m\"\nmax_retry_wait = \"2m\"\nmax_total_tokens = 50000\nmax_tool_calls = 20\n"))
	if err != nil || c.LLM.StreamIdleTimeout.Std() != 5*time.Minute || c.LLM.MaxRetryWait.Std() != 2*time.Minute || c.LLM.MaxTotalTokens != 50000 || c.LLM.MaxToolCalls != 20 {
		t.Errorf("request keys = %+v, %v", c.LLM, err)
	}
	// Setting only allowed keeps allow_unspecified at its default (true).
	c, err = Parse("agrun.toml", []byte("[permissions]\nallowed = [\"read\"]\n"))
	if err != nil || !c.PermissionConfig().AllowUnspecified || len(c.PermissionConfig().Denied) != 0 {
		t.Errorf("partial permissions = %+v, %v", c.PermissionConfig(), err)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, toml string
		line       int
		key, msg   string
	}{
		{"unknown top key", "[llm]\nmodel = \"x\"\n\n[llmm]\nmodel = \"y\"\n", 4, "llmm", "unknown key"},
		{"unknown nested key", "[tools.wc]\nwasm = \"a.wasm\"\nwasmm = \"b.wasm\"\n", 3, "tools.wc.wasmm", "unknown key"},
		{"unknown key in mcp", "[mcp.s]\ncommand = \"x\"\ncmd = \"y\"\n", 3, "mcp.s.cmd", "unknown key"},
		{"wrong type", "[llm]\nmax_turns = \"ten\"\n", 2, "llm.max_turns", "incompatible types"},
		{"bad duration", "[sandbox]\n\ntimeout = \"10 seconds\"\n", 3, "sandbox.timeout", "bad duration"},
		{"negative duration", "[sandbox]\ntimeout = \"-1s\"\n", 2, "sandbox.timeout", "must be positive"},
		{"bad size", "[sandbox]\nmemory = \"64 megs\"\n", 2, "sandbox.memory", "bad size"},
		{"unknown permission", "[permissions]\nallowed = [\"read\", \"sudo\"]\n", 2, "permissions.allowed", "invalid permission \"sudo\""},
		{"mcp without command or url", "[mcp.broken]\nargs = [\"x\"]\n", 1, "mcp.broken", "needs \"command\""},
		{"mcp with both", "[mcp.both]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n", 1, "mcp.both", "both"},
		{"mcp name with __", "[mcp.a__b]\ncommand = \"x\"\n", 1, "mcp.a__b", "__"},
		{"tool without wasm", "[tools.t]\ntimeout = \"1s\"\n", 1, "tools.t", "missing \"wasm\""},
		{"bad tool name", "[tools.\"a b\"]\nwasm = \"x\"\n", 0, "", "tool name"},
		{"bad sha", "[tools.t]\nwasm = \"x\"\nsha256 = \"ABC\"\n", 3, "tools.t.sha256", "64 lowercase hex"},
		{"bad host", "[tools.t]\nwasm = \"x\"\nallowed_hosts = [\"https://evil.com/x\"]\n", 3, "tools.t.allowed_hosts", "without scheme"},
		{"bad mount", "[tools.t]\nwasm = \"x\"\nmounts = [\"./a:/b:rx\"]\n", 3, "tools.t.mounts", "mode must be"},
		{"relative guest mount", "[tools.t]\nwasm = \"x\"\nmounts = [\"./a:b\"]\n", 3, "tools.t.mounts", "absolute"},
		{"negative token budget", "[llm]\nmax_total_tokens = -5\n", 0, "llm.max_total_tokens", "must be positive"},
		{"negative tool call budget", "[llm]\nmax_tool_calls = -1\n", 0, "llm.max_tool_calls", "must be positive"},
		{"negative idle timeout", "[llm]\nstream_idle_timeout = \"-1s\"\n", 2, "llm.stream_idle_timeout", "must be positive"},
		{"oauth on a command", "[mcp.s]\ncommand = \"x\"\noauth = {}\n", 0, "mcp.s.oauth", "streamable-HTTP"},
		{"headers_env bad name", "[mcp.s]\nurl = \"http://h/mcp\"\nheaders_env = { Authorization = \"MY-TOKEN\" }\n", 0, "mcp.s.headers_env", "not a variable name"},
		{"headers_env and headers", "[mcp.s]\nurl = \"http://h/mcp\"\nheaders = { A = \"x\" }\nheaders_env = { A = \"T\" }\n", 0, "mcp.s.headers_env", "in headers too"},
		{"oauth secret without id", "[mcp.s]\nurl = \"http://h/mcp\"\noauth = { client_secret_env = \"S\" }\n", 0, "mcp.s.oauth.client_secret_env", "needs client_id"},
		{"oauth metadata url", "[mcp.s]\nurl = \"http://h/mcp\"\noauth = { client_metadata_url = \"http://x/c.json\" }\n", 0, "mcp.s.oauth.client_metadata_url", "https://"},
		{"sampling mode", "[mcp.s]\ncommand = \"x\"\nsampling = \"yes\"\n", 0, "mcp.s.sampling", `must be "ask", "allow" or "deny"`},
		{"sampling max tokens", "[mcp.s]\ncommand = \"x\"\nsampling_max_tokens = 100000\n", 0, "mcp.s.sampling_max_tokens", "1 to 32768"},
		{"sampling run tokens", "[mcp.s]\ncommand = \"x\"\nsampling_max_run_tokens = -1\n", 0, "mcp.s.sampling_max_run_tokens", "positive"},
		{"oauth key without client credentials", "[mcp.s]\nurl = \"http://h/mcp\"\noauth = { private_key_file = \"k.pem\" }\n", 0, "mcp.s.oauth.private_key_file", "client_credentials = true"},
		{"client credentials without id", "[mcp.s]\nurl = \"http://h/mcp\"\noauth = { client_credentials = true, client_secret_env = \"S\" }\n", 0, "mcp.s.oauth.client_secret_env", "needs client_id"},
		{"client credentials without secret", "[mcp.s]\nurl = \"http://h/mcp\"\noauth = { client_credentials = true, client_id = \"c\" }\n", 0, "mcp.s.oauth.client_credentials", "one of them"},
		{"client credentials with both", "[mcp.s]\nurl = \"http://h/mcp\"\noauth = { client_credentials = true, client_id = \"c\", client_secret_env = \"S\", private_key_file = \"k.pem\" }\n", 0, "mcp.s.oauth.client_credentials", "one of them"},
		{"client credentials with a login key", "[mcp.s]\nurl = \"http://h/mcp\"\noauth = { client_credentials = true, client_id = \"c\", client_secret_env = \"S\", redirect_port = 8080 }\n", 0, "mcp.s.oauth.client_credentials", "no login"},
		{"oauth unknown key", "[mcp.s]\nurl = \"http://h/mcp\"\noauth = { clientid = \"x\" }\n", 0, "mcp.s.oauth.clientid", "unknown key"},
		{"plugin name ending in _", "[plugins.fetch_]\nwasm = \"x\"\n", 1, "plugins.fetch_", "start or end"},
		{"mcp name ending in _", "[mcp.a_]\ncommand = \"x\"\n", 1, "mcp.a_", "start or end"},
		{"plugin describing key", "[plugins.p]\nwasm = \"x\"\noutput = \"text\"\n", 3, "plugins.p.output", "described by its own list"},
		{"negative max_compiles", "[sandbox]\n\nmax_compiles = -1\n", 3, "sandbox.max_compiles", "between 0"},
		{"too many compiles", "[sandbox]\nmax_compiles = 100000\n", 2, "sandbox.max_compiles", "and 256"},
		{"metered code too large", "[sandbox]\nmax_metered_code = \"1GiB\"\n", 2, "sandbox.max_metered_code", "and 256MiB"},
		{"metered code not a size", "[sandbox]\nmax_metered_code = \"lots\"\n", 2, "sandbox.max_metered_code", "bad size"},
		{"max_compiles not a number", "[sandbox]\nmax_compiles = \"4\"\n", 2, "sandbox.max_compiles", "incompatible types"},
		{"syntax error", "[llm\nmodel = 1\n", 0, "", "table name"},
		{"duplicate key", "[llm]\nmodel = \"a\"\nmodel = \"b\"\n", 3, "", "already been defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("agrun.toml", []byte(tc.toml))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %v, want *Error", err)
			}
			if tc.line != 0 && ce.Line != tc.line {
				t.Errorf("line = %d, want %d (%v)", ce.Line, tc.line, err)
			}
			if tc.key != "" && ce.Key != tc.key {
				t.Errorf("key = %q, want %q (%v)", ce.Key, tc.key, err)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "agrun.toml:") {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[string]Size{"1024": 1024, "64MiB": 64 << 20, "512KiB": 512 << 10, "1GB": 1e9, "10B": 10, "2 MiB": 2 << 20} {
		var s Size
		if err := s.UnmarshalText([]byte(in)); err != nil || s != want {
			t.Errorf("%q = %d, %v; want %d", in, s, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "10XB", "99999999999999999999TiB"} {
		var s Size
		if err := s.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestLoadAndLocate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(p, []byte("[tools.t]\nwasm = \"t.wasm\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil || c.Tools["t"].Wasm != filepath.Join(dir, "t.wasm") || c.Path != p {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.toml")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	t.Setenv("AGRUN_CONFIG", "/from/env.toml")
	if got, explicit := Locate("flag.toml"); got != "flag.toml" || !explicit {
		t.Fatal("flag must win")
	}
	if got, explicit := Locate(""); got != "/from/env.toml" || !explicit {
		t.Fatal("env must be second")
	}
	t.Setenv("AGRUN_CONFIG", "")
	if got, explicit := Locate(""); got != "agrun.toml" || explicit {
		t.Fatal("./agrun.toml is the fallback")
	}
}

func TestServeWebKeys(t *testing.T) {
	c, err := Parse("agrun.toml", []byte("[serve]\nallowed_hosts = [\"agrun.example.com\", \"10.0.0.5:8080\", \"[fd00::1]:8080\"]\nbody_timeout = \"5s\"\nmax_calls_per_client = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Serve
	if len(s.AllowedHosts) != 3 || s.AllowedHosts[2] != "[fd00::1]:8080" || s.BodyTimeout.Std() != 5*time.Second || s.MaxCallsPerClient != 3 {
		t.Errorf("serve = %+v", s)
	}
	_, err = Parse("agrun.toml", []byte("[serve]\n\nallowed_hosts = [\"http://agrun.example.com\"]\n"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "serve.allowed_hosts" || ce.Line != 3 || !strings.Contains(err.Error(), "without scheme") {
		t.Errorf("a URL in serve.allowed_hosts: %v", err)
	}
}

func TestFuelAndStackKeys(t *testing.T) {
	c, err := Parse("agrun.toml", []byte("[sandbox]\nfuel = 5000000\nmax_stack = \"8MiB\"\n\n[tools.t]\nwasm = \"t.wasm\"\nfuel = 1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox.Fuel != 5_000_000 || c.Sandbox.MaxStack != 8<<20 || c.Tools["t"].Fuel != 1000 {
		t.Errorf("sandbox %+v, tool %+v", c.Sandbox, c.Tools["t"])
	}
	for _, bad := range []string{"[sandbox]\nfuel = -1\n", "[sandbox]\nmax_stack = \"2GiB\"\n", "[tools.t]\nwasm = \"t.wasm\"\nfuel = -5\n"} {
		var ce *Error
		if _, err := Parse("agrun.toml", []byte(bad)); !errors.As(err, &ce) {
			t.Errorf("%q: err = %v, want a *config.Error", bad, err)
		}
	}
}

// TestCompileKeys: [sandbox] max_compiles and max_metered_code decode
// into the runtime's compile bounds; unset, both are 0 (the runtime's
// defaults).
func TestCompileKeys(t *testing.T) {
	c, err := Parse("agrun.toml", []byte("[sandbox]\nmax_compiles = 2\nmax_metered_code = \"8MiB\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox.MaxCompiles != 2 || c.Sandbox.MaxMeteredCode != 8<<20 {
		t.Errorf("sandbox %+v", c.Sandbox)
	}
	if c, err := Parse("agrun.toml", []byte("[sandbox]\n")); err != nil || c.Sandbox.MaxCompiles != 0 || c.Sandbox.MaxMeteredCode != 0 {
		t.Errorf("unset: %+v, %v", c.Sandbox, err)
	}
}

// TestFind: a missing ./agrun.toml that nobody named gives the defaults
// (no Path); a named file that is missing is an error; a named file is
// loaded.
func TestFind(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("AGRUN_CONFIG", "")
	cfg, err := Find("")
	if err != nil || cfg.Path != "" {
		t.Fatalf("no config: %v, path %q", err, cfg.Path)
	}
	if _, err := Find("missing.toml"); err == nil {
		t.Error("a named missing file is no error")
	}
	if err := os.WriteFile("agrun.toml", []byte("[llm]\nmodel = \"m\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := Find(""); err != nil || cfg.LLM.Model != "m" || cfg.Path == "" {
		t.Errorf("./agrun.toml: %v %+v", err, cfg)
	}
}
