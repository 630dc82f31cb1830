// Package config decodes agrun.toml strictly: an unknown key, a wrong type,
// a bad duration or size, an unknown permission or an incomplete section is
// an *Error naming the key and its line. Relative paths are resolved against
// the folder of the config file.
//
//	cfg, err := config.Load("agrun.toml")
//	if err != nil {
//		fmt.Fprintln(os.Stderr, err) // agrun.toml:12: tools.wc.wasmm: unknown key
//		os.Exit(2)
//	}
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// Config is a decoded agrun.toml. Paths in it are absolute.
type Config struct {
	LLM         LLM                  `toml:"llm"`
	Sandbox     Sandbox              `toml:"sandbox"`
	Permissions Permissions          `toml:"permissions"`
	Tools       map[string]Tool      `toml:"tools"`
	Plugins     map[string]Tool      `toml:"plugins"` // MCP-style plug-ins (plugins.go)
	MCP         map[string]MCPServer `toml:"mcp"`
	Sessions    Sessions             `toml:"sessions"`
	Serve       Serve                `toml:"serve"`
	Telemetry   Telemetry            `toml:"telemetry"`
	Approvals   Approvals            `toml:"approvals"`
	Cluster     Cluster              `toml:"cluster"`
	OCI         OCI                  `toml:"oci"`
	Registries  map[string]Registry  `toml:"registries"`
	Trust       Trust                `toml:"trust"` // trust.go: keys and require_signature

	// Path is the config file's absolute path ("" for Default()).
	Path string `toml:"-"`
}

// LLM is the [llm] section: the model API and how the loop uses it.
type LLM struct {
	// API is the wire API: "chat" (the default), "responses",
	// "anthropic" or "gemini". base_url, api_key_env and model default
	// per API (APIDefaults).
	API               string   `toml:"api"`
	BaseURL           string   `toml:"base_url"`
	Model             string   `toml:"model"`
	APIKeyEnv         string   `toml:"api_key_env"` // the variable holding the key; the key itself never appears in a config
	MaxTurns          int      `toml:"max_turns"`
	System            string   `toml:"system"`
	Temperature       *float64 `toml:"temperature"`
	ParallelToolCalls *bool    `toml:"parallel_tool_calls"`
	Timeout           Duration `toml:"timeout"` // per request attempt
	MaxRetries        *int     `toml:"max_retries"`
	StreamIdleTimeout Duration `toml:"stream_idle_timeout"` // loop.Config.StreamIdleTimeout; unset: the loop's default (60s)
	MaxRetryWait      Duration `toml:"max_retry_wait"`      // loop.Config.MaxRetryWait; unset: the loop's default (30s)
	MaxTotalTokens    int64    `toml:"max_total_tokens"`    // loop.Config.MaxTotalTokens: a run's token budget; 0 none
	MaxToolCalls      int      `toml:"max_tool_calls"`      // loop.Config.MaxToolCalls: a run's tool call budget; 0 none
	// MaxToolResult caps each tool result sent to the model (longer ones
	// are cut, the whole kept in the session); nil: 32KiB; "0": no cap.
	MaxToolResult *Size `toml:"max_tool_result"`
	// ContextWindow is the model's context window in tokens; 0: unknown.
	ContextWindow int `toml:"context_window"`
	// SchemaMode is how `run --schema` asks for structured output:
	// "auto" (default), "native" (response_format only) or "prompt".
	SchemaMode string `toml:"schema_mode"`
	// Reasoning is the reasoning effort: "" (the API's default), "off",
	// "low", "medium" or "high"; anthropic and gemini map it to a
	// thinking budget (docs/CONFIG.md).
	Reasoning string `toml:"reasoning"`
	// Store (api = "responses" only) keeps responses on OpenAI's side and
	// continues with previous_response_id instead of sending the
	// reasoning items back.
	Store bool `toml:"store"`
	// MaxOutputTokens bounds each reply's tokens; 0: the API's default
	// (anthropic, which requires one: 8192, plus the thinking budget).
	MaxOutputTokens int64 `toml:"max_output_tokens"`
	// PromptCache (api = "anthropic"): mark the system prompt, the tool
	// definitions and the end of the conversation cacheable
	// (cache_control); nil: true.
	PromptCache *bool `toml:"prompt_cache"`
}

// APIDefaults are the defaults of [llm] per api: base URL, the variable
// holding the key, and the model.
var APIDefaults = map[string]struct{ BaseURL, KeyEnv, Model string }{
	"chat":      {"https://api.openai.com/v1", "OPENAI_API_KEY", "gpt-4.1-mini"},
	"responses": {"https://api.openai.com/v1", "OPENAI_API_KEY", "gpt-5-mini"},
	"anthropic": {"https://api.anthropic.com", "ANTHROPIC_API_KEY", "claude-sonnet-4-5"},
	"gemini":    {"https://generativelanguage.googleapis.com", "GEMINI_API_KEY", "gemini-2.5-flash"},
}

// Sandbox is the [sandbox] section: defaults for every WASM tool.
type Sandbox struct {
	CacheDir     string   `toml:"cache_dir"`
	NoCache      bool     `toml:"no_cache"`
	NoPrepare    bool     `toml:"no_prepare"` // runtime.Config.DisablePrepare
	Timeout      Duration `toml:"timeout"`
	Memory       Size     `toml:"memory"`
	MaxOutput    Size     `toml:"max_output"`
	MaxWrite     Size     `toml:"max_write"` // bytes a call may write to its writable mounts
	Fuel         int64    `toml:"fuel"`      // runtime.Limits.Fuel: a call's CPU budget in instructions; 0 none
	MaxStack     Size     `toml:"max_stack"` // runtime.Config.MaxStackBytes
	MaxParallel  int      `toml:"max_parallel"`
	MaxInstances int      `toml:"max_instances"`
	// MaxCompiles bounds the modules compiled at once in the process
	// (runtime.Config.MaxCompiles); 0: min(CPUs, 4).
	MaxCompiles int `toml:"max_compiles"`
	// MaxMeteredCode refuses a module whose code would be larger once
	// metered (runtime.Config.MaxMeteredCodeBytes): it bounds one
	// compile's memory; 0: 32MiB.
	MaxMeteredCode Size `toml:"max_metered_code"`
}

// The largest [sandbox] max_compiles and max_metered_code accepted: a
// compile may take about 20 bytes per byte of metered code
// (docs/SECURITY.md, "Compiling"), so 256 MiB is already some 5 GB for
// one compile, and more compiles at once than that many are no bound.
const (
	MaxCompilesLimit    = 256
	MaxMeteredCodeLimit = 256 << 20
)

// Permissions is the [permissions] section.
type Permissions struct {
	Allowed          []permission.Permission `toml:"allowed"`
	Denied           []permission.Permission `toml:"denied"`
	AllowUnspecified *bool                   `toml:"allow_unspecified"`
}

// Tool is one [tools.NAME] section: a WASM tool and what it is granted.
type Tool struct {
	Wasm         string   `toml:"wasm"`
	OCI          string   `toml:"oci"` // a pinned reference pulled into the module store (oci.go); exactly one of wasm and oci
	Manifest     string   `toml:"manifest"`
	AllowedHosts []string `toml:"allowed_hosts"`
	AllowPrivate bool     `toml:"allow_private"`
	SHA256       string   `toml:"sha256"`
	Timeout      Duration `toml:"timeout"`
	Memory       Size     `toml:"memory"`
	MaxOutput    Size     `toml:"max_output"`
	MaxWrite     Size     `toml:"max_write"`
	Fuel         int64    `toml:"fuel"`
	Mounts       []Mount  `toml:"mounts"`
	// MaxToolResult overrides [llm] max_tool_result for this tool.
	MaxToolResult *Size `toml:"max_tool_result"`
	// Approve is "ask", "always" or "never" (approvals.go); "" follows [approvals].
	Approve string `toml:"approve"`
	// RequireSignature overrides [trust] require_signature for this tool;
	// Signature is a wasm file's sigstore bundle (trust.go).
	RequireSignature *bool  `toml:"require_signature"`
	Signature        string `toml:"signature"`

	// An Extism plug-in (a module importing extism:host/env) has no
	// manifest: these describe it instead. Function is the export each
	// call runs (default: the tool's name); Permissions default to what
	// the grant implies (network with allowed_hosts, filesystem and read
	// with mounts, write and delete with rw and rwd mounts); Config is what
	// the plug-in reads with config_get ([tools.NAME.config]).
	Function    string                  `toml:"function"`
	Description string                  `toml:"description"`
	Parameters  JSONValue               `toml:"parameters"`
	Output      string                  `toml:"output"`
	Permissions []permission.Permission `toml:"permissions"`
	Config      map[string]string       `toml:"config"`
}

// JSONValue is a TOML value kept as JSON (a plug-in's parameters
// schema); nil when the key is absent.
type JSONValue json.RawMessage

// UnmarshalTOML implements toml.Unmarshaler: the value as JSON.
func (v *JSONValue) UnmarshalTOML(x any) error {
	b, err := json.Marshal(x)
	if err != nil {
		return err
	}
	*v = b
	return nil
}

// PluginKeys lists the plug-in keys t sets (function, description,
// parameters, output, permissions, config), in that order.
func (t Tool) PluginKeys() []string {
	var keys []string
	for _, k := range []struct {
		name string
		set  bool
	}{
		{"function", t.Function != ""}, {"description", t.Description != ""}, {"parameters", t.Parameters != nil},
		{"output", t.Output != ""}, {"permissions", t.Permissions != nil}, {"config", t.Config != nil},
	} {
		if k.set {
			keys = append(keys, k.name)
		}
	}
	return keys
}

// MCPServer is one [mcp.NAME] section.
type MCPServer struct {
	Command string            `toml:"command"`
	Args    []string          `toml:"args"`
	Env     map[string]string `toml:"env"`
	Dir     string            `toml:"dir"`
	URL     string            `toml:"url"`
	Headers map[string]string `toml:"headers"`
	// HeadersEnv adds headers whose values are secrets: header name ->
	// the variable holding its value (an unset one is a configuration
	// error), so that a token never sits in agrun.toml.
	HeadersEnv map[string]string `toml:"headers_env"`
	// OAuth authorizes a streamable-HTTP server with OAuth 2.1 (mcp.go);
	// nil: no OAuth.
	OAuth       *MCPOAuth               `toml:"oauth"`
	Timeout     Duration                `toml:"timeout"`
	Permissions []permission.Permission `toml:"permissions"`
	// MaxToolResult overrides [llm] max_tool_result for this server's tools.
	MaxToolResult *Size `toml:"max_tool_result"`
	// Approve is "ask", "always" or "never" for every tool of the server.
	Approve string `toml:"approve"`
	// Roots are directories offered to the server as its roots (file://
	// URIs; relative to the config's folder). They tell a server where to
	// work and grant nothing.
	Roots []string `toml:"roots"`
	// Resources offers the server's resources to the model as the tool
	// NAME__read_resource (it declares "read").
	Resources bool `toml:"resources"`
	// ServeResources re-serves the server's resources, resource
	// templates, prompts, completions and resource subscriptions to the
	// clients of `agrun mcp serve` (cleaned and bounded; a prompt under
	// its own name, or NAME__PROMPT when a server earlier by name serves
	// one of that name).
	ServeResources bool `toml:"serve_resources"`
	// Sampling is whether the server may have agrun's model write for
	// it (sampling/createMessage): "ask" (the default, ""), "allow" or
	// "deny" (the capability is not declared). mcp.go has the budgets.
	Sampling string `toml:"sampling"`
	// SamplingMaxTokens caps each sampling request's maxTokens; 0:
	// mcp.DefaultSamplingMaxTokens.
	SamplingMaxTokens int `toml:"sampling_max_tokens"`
	// SamplingMaxRunTokens bounds the tokens (prompt and reply) the
	// server's sampling may spend in one run (outside a run: in the
	// process); 0: DefaultSamplingRunTokens.
	SamplingMaxRunTokens int64 `toml:"sampling_max_run_tokens"`
}

// Sessions is the [sessions] section.
type Sessions struct {
	Dir string `toml:"dir"`
}

// Serve is the [serve] section of `agrun serve`.
type Serve struct {
	Addr               string   `toml:"addr"`
	TokensEnv          string   `toml:"tokens_env"`
	MaxUpload          Size     `toml:"max_upload"`
	MaxBody            Size     `toml:"max_body"`
	MaxConcurrentCalls int      `toml:"max_concurrent_calls"`
	CallTimeout        Duration `toml:"call_timeout"`
	ReadTimeout        Duration `toml:"read_timeout"`
	WriteTimeout       Duration `toml:"write_timeout"`
	UploadsPerMinute   int      `toml:"uploads_per_minute"`
	DataDir            string   `toml:"data_dir"`
	Uploads            Uploads  `toml:"uploads"`
	// AllowedHosts are the Host names (host or host:port) the server
	// answers beside loopback and its own address: the public name of a
	// server behind a proxy.
	AllowedHosts []string `toml:"allowed_hosts"`
	// BodyTimeout bounds the time a client takes to send a request body.
	BodyTimeout Duration `toml:"body_timeout"`
	// MaxCallsPerClient bounds the calls and runs one token (without
	// tokens: one client address) has in progress at once.
	MaxCallsPerClient int `toml:"max_calls_per_client"`
	// MaxConnections and MaxConnectionsPerClient bound the connections
	// open at once, in all and from one client address (serve and mcp
	// serve --http).
	MaxConnections          int `toml:"max_connections"`
	MaxConnectionsPerClient int `toml:"max_connections_per_client"`
	// ApprovalTimeout is how long a run waits for its client's decision
	// about a call that needs approval (then it is denied); unset: 10m.
	ApprovalTimeout Duration `toml:"approval_timeout"`
	// AllowedRegistries are the OCI registries (HOST or HOST:PORT) an
	// upload may name by reference ({"oci": REF}); none: no such uploads.
	AllowedRegistries []string `toml:"allowed_registries"`
	// Tenants are the [serve.tenants.NAME] sections (tenants.go); none:
	// one tenant, "default", with tokens_env and [serve.uploads].
	Tenants map[string]Tenant `toml:"tenants"`
}

// Telemetry is the [telemetry] section: OpenTelemetry traces and metrics
// over OTLP/HTTP (docs/OBSERVABILITY.md). Off unless OTLPEndpoint or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set.
type Telemetry struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL
	// ("http://localhost:4318"); traces go to /v1/traces, metrics to
	// /v1/metrics. Empty: the OTEL_EXPORTER_OTLP_* variables.
	OTLPEndpoint string `toml:"otlp_endpoint"`
	// HeadersEnv names the variable holding the export's headers,
	// "k=v,k2=v2" (an API key never sits in the config).
	HeadersEnv string `toml:"headers_env"`
	// Sampling is the fraction of runs traced, 0 < sampling <= 1; nil: 1.
	Sampling *float64 `toml:"sampling"`
	// CaptureContent records prompts, replies, tool arguments and results
	// in spans. Off by default.
	CaptureContent bool `toml:"capture_content"`
}

// Cluster is the [cluster] section: run sessions on Temporal
// (docs/SCALING.md). Off unless TemporalAddress is set; then `run` and
// `chat` start each run as a workflow on the cluster's workers (`agrun
// worker`), and the stores below are shared by every process.
type Cluster struct {
	// TemporalAddress is the Temporal frontend, host:port
	// ("127.0.0.1:7233"). Setting it switches the cluster on.
	TemporalAddress string `toml:"temporal_address"`
	// Namespace is the Temporal namespace; "": "default".
	Namespace string `toml:"namespace"`
	// TaskQueuePrefix names the task queues (<prefix>sessions, llm, wasm,
	// mcp); "": "agrun-".
	TaskQueuePrefix string `toml:"task_queue_prefix"`
	// RetrySideEffects: a call of a tool with side effects (declared
	// write, delete, network, ...; an MCP tool not marked read-only) whose
	// worker was lost is run again. Off: the model is told.
	RetrySideEffects bool `toml:"retry_side_effects"`
	// HeartbeatTimeout: a worker silent this long is lost and its
	// activity retried elsewhere; unset: 20s. Also the run's workflow
	// task timeout (10s to 120s): how a lost worker's local call is
	// noticed.
	HeartbeatTimeout Duration `toml:"heartbeat_timeout"`
	// ApprovalTimeout: a call that needs a person's yes waits this long
	// for the decision (`agrun run` on a terminal, `run --approve`), then
	// it is denied; unset: 1h.
	ApprovalTimeout Duration `toml:"approval_timeout"`
	// ModuleStore is where uploaded modules and payloads passed by
	// reference are kept: a directory, or "s3://bucket/prefix" (the AWS
	// SDK's credentials chain: AWS_ACCESS_KEY_ID, ...). "": a directory
	// in the data dir (one machine only).
	ModuleStore string `toml:"module_store"`
	// S3Endpoint, S3Region and S3PathStyle reach S3-compatible storage
	// other than AWS (MinIO, R2, Ceph): its URL, region, path-style
	// addressing.
	S3Endpoint  string `toml:"s3_endpoint"`
	S3Region    string `toml:"s3_region"`
	S3PathStyle bool   `toml:"s3_path_style"`
	// SessionStore is "" (the [sessions] dir's JSON-lines files: one
	// machine, or a shared file system) or "postgres".
	SessionStore string `toml:"session_store"`
	// PostgresDSNEnv names the variable that holds the PostgreSQL
	// connection string (it holds a password: never in the config);
	// "": AGRUN_POSTGRES_DSN.
	PostgresDSNEnv string `toml:"postgres_dsn_env"`
	// Models are the models a run may ask for (`agrun run -m`) besides
	// [llm] model, each through [llm]'s API, base URL and key: a worker
	// refuses any other (a run's model is the starter's choice, the
	// worker's config the ceiling: docs/SCALING.md).
	Models []string `toml:"models"`
}

// Enabled reports whether the cluster is configured.
func (c Cluster) Enabled() bool { return c.TemporalAddress != "" }

// Uploads is [serve.uploads]: what uploaded tools are granted (default:
// nothing — pure compute).
type Uploads struct {
	AllowedHosts []string `toml:"allowed_hosts"`
	AllowPrivate bool     `toml:"allow_private"`
	Timeout      Duration `toml:"timeout"`
	Memory       Size     `toml:"memory"`
	MaxOutput    Size     `toml:"max_output"`
}

// Mount is a HOST:GUEST[:MODE] mount; MODE is ro (default), rw, or rwd
// (rw + delete).
type Mount struct {
	Host        string
	Guest       string
	Writable    bool
	AllowDelete bool
}

// UnmarshalText parses HOST:GUEST[:MODE].
func (m *Mount) UnmarshalText(b []byte) error {
	s := string(b)
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return fmt.Errorf("mount %q: want HOST:GUEST[:MODE]", s)
	}
	*m = Mount{Host: parts[0], Guest: parts[1]}
	if !strings.HasPrefix(m.Guest, "/") {
		return fmt.Errorf("mount %q: guest path must be absolute", s)
	}
	if len(parts) == 3 {
		mode, err := registry.ParseMountMode(parts[2])
		if err != nil {
			return fmt.Errorf("mount %q: %w", s, err)
		}
		m.Writable, m.AllowDelete = mode.Writable(), mode.Delete()
	}
	return nil
}

// String returns the mount in HOST:GUEST:MODE form.
func (m Mount) String() string {
	return m.Host + ":" + m.Guest + ":" + registry.MountModeOf(m.Writable, m.AllowDelete).String()
}

// Duration is a time.Duration written as "10s", "1m30s".
type Duration time.Duration

// UnmarshalText parses a Go duration; it must be positive.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. \"10s\", \"500ms\", \"2m\")", b)
	}
	if v <= 0 {
		return fmt.Errorf("duration %q must be positive", b)
	}
	*d = Duration(v)
	return nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Size is a byte count written as "64MiB", "512KiB", "1GB" or "1024".
type Size int64

var sizeRE = regexp.MustCompile(`^\s*([0-9]+)\s*([KMGT]i?B|B)?\s*$`)

// UnmarshalText parses a size: an integer with an optional unit B, KB, MB,
// GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
func (s *Size) UnmarshalText(b []byte) error {
	m := sizeRE.FindStringSubmatch(string(b))
	if m == nil {
		return fmt.Errorf("bad size %q (want e.g. \"64MiB\", \"512KiB\", \"1000000\")", b)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return fmt.Errorf("bad size %q: %v", b, err)
	}
	mult := map[string]int64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[m[2]]
	if n > (1<<62)/mult {
		return fmt.Errorf("size %q too large", b)
	}
	*s = Size(n * mult)
	return nil
}

// Error is a configuration error: the file, the line (0 if unknown), the
// key, and what is wrong.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

// Error implements error: "agrun.toml:12: tools.wc.wasm: file not found".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// DefaultLLMTimeout bounds one model request attempt, streamed reply
// included, when [llm] timeout is unset: long enough for a reasoning
// model's long answer, short enough that no provider holds a run forever.
const DefaultLLMTimeout = 10 * time.Minute

// Default returns the configuration used when no file exists: no tools, the
// default permission policy, OpenAI's endpoint.
func Default() *Config {
	c := &Config{}
	c.applyDefaults()
	return c
}

// Load reads and decodes the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	return Parse(path, data)
}

// Parse decodes data as the config file at path (used for messages and to
// resolve relative paths).
func Parse(path string, data []byte) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	c := &Config{Path: abs}
	lines := newLineIndex(string(data))
	md, err := toml.Decode(string(data), c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{File: path, Line: pe.Position.Line, Key: pe.LastKey, Msg: cleanTOML(pe.Message)}
		}
		if m := tomlErrRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, &Error{File: path, Line: line, Key: m[2], Msg: m[3]}
		}
		return nil, &Error{File: path, Msg: cleanTOML(err.Error())}
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		return nil, &Error{File: path, Line: lines.find(k), Key: k.String(), Msg: "unknown key"}
	}
	if err := c.check(path, lines); err != nil {
		return nil, err
	}
	c.applyDefaults()
	c.resolvePaths(filepath.Dir(abs))
	if err := c.checkTrust(filepath.Dir(abs), func(msg string, key ...string) error {
		return &Error{File: path, Line: lines.find(key), Key: toml.Key(key).String(), Msg: msg}
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// tomlErrRE matches the decoder's type errors, which are plain errors with
// the position in the text.
var tomlErrRE = regexp.MustCompile(`(?s)^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// cleanTOML drops the library's "toml: " prefix and location, which Error
// reports in its own form.
func cleanTOML(s string) string {
	s = strings.TrimPrefix(s, "toml: ")
	if i := strings.Index(s, "): "); i >= 0 && strings.HasPrefix(s, "line ") {
		s = s[i+3:]
	}
	return s
}

var shaRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

var hostRE = regexp.MustCompile(`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$`)

func (c *Config) check(path string, lines *lineIndex) error {
	errAt := func(msg string, key ...string) error {
		return &Error{File: path, Line: lines.find(key), Key: toml.Key(key).String(), Msg: msg}
	}
	for _, name := range sortedKeys(c.Tools) {
		t := c.Tools[name]
		if !registry.ValidName(name) {
			return errAt("tool name must match "+registry.NamePattern, "tools", name)
		}
		if strings.Contains(name, "__") {
			return errAt(`tool name may not contain "__": NAME__TOOL names the tools of [mcp.NAME] and [plugins.NAME]`, "tools", name)
		}
		if err := checkModule(t, "tools", name, errAt); err != nil {
			return err
		}
		if keys := t.PluginKeys(); t.Manifest != "" && len(keys) > 0 {
			return errAt(fmt.Sprintf("%q is for an Extism plug-in, which has no manifest file; \"manifest\" is for a bare WASI program: keep one of them", keys[0]), "tools", name, keys[0])
		}
		if err := checkGrantKeys(t, "tools", name, errAt); err != nil {
			return err
		}
	}
	if err := c.checkPlugins(errAt); err != nil {
		return err
	}
	for _, h := range c.Serve.AllowedHosts {
		if !hostRE.MatchString(h) {
			return errAt(fmt.Sprintf("allowed host %q: want a host name or host:port, without scheme or path", h), "serve", "allowed_hosts")
		}
	}
	for _, h := range c.Serve.Uploads.AllowedHosts {
		if !hostRE.MatchString(h) {
			return errAt(fmt.Sprintf("allowed host %q: want a host name or host:port, without scheme or path", h), "serve", "uploads", "allowed_hosts")
		}
	}
	for _, name := range sortedKeys(c.MCP) {
		s := c.MCP[name]
		switch {
		case s.Command == "" && s.URL == "":
			return errAt(`needs "command" (a stdio server) or "url" (streamable HTTP)`, "mcp", name)
		case s.Command != "" && s.URL != "":
			return errAt(`has both "command" and "url"; choose one`, "mcp", name)
		case strings.Contains(name, "__") || strings.HasPrefix(name, "_") || strings.HasSuffix(name, "_"):
			return errAt(`server name may not contain "__" nor start or end with "_" (NAME__TOOL must say where NAME ends)`, "mcp", name)
		case !registry.ValidName(name):
			return errAt("server name must match "+registry.NamePattern, "mcp", name)
		}
		if s.URL != "" && !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			return errAt("url must start with http:// or https://", "mcp", name, "url")
		}
		if err := checkMCPAuth(name, s, errAt); err != nil {
			return err
		}
		if err := checkMCPSampling(name, s, errAt); err != nil {
			return err
		}
	}
	if e := c.Telemetry.OTLPEndpoint; e != "" && !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
		return errAt("must be an http:// or https:// URL (OTLP over HTTP), e.g. \"http://localhost:4318\"", "telemetry", "otlp_endpoint")
	}
	if p := c.Telemetry.Sampling; p != nil && (*p <= 0 || *p > 1) {
		return errAt("must be more than 0 and at most 1 (the fraction of runs traced)", "telemetry", "sampling")
	}
	if c.LLM.MaxTurns < 0 {
		return errAt("must be positive", "llm", "max_turns")
	}
	if c.LLM.MaxTotalTokens < 0 {
		return errAt("must be positive (0: no budget)", "llm", "max_total_tokens")
	}
	if c.LLM.MaxToolCalls < 0 {
		return errAt("must be positive (0: no budget)", "llm", "max_tool_calls")
	}
	if c.LLM.ContextWindow < 0 {
		return errAt("must be positive (tokens; 0: unknown)", "llm", "context_window")
	}
	switch c.LLM.SchemaMode {
	case "", "auto", "native", "prompt":
	default:
		return errAt(`must be "auto", "native" or "prompt"`, "llm", "schema_mode")
	}
	if _, ok := APIDefaults[c.LLM.API]; !ok && c.LLM.API != "" {
		return errAt(`must be "chat", "responses", "anthropic" or "gemini"`, "llm", "api")
	}
	switch c.LLM.Reasoning {
	case "", "off", "low", "medium", "high":
	default:
		return errAt(`must be "off", "low", "medium" or "high" (or unset: the API's default)`, "llm", "reasoning")
	}
	if c.LLM.Store && c.LLM.API != "responses" {
		return errAt(`applies only to api = "responses"`, "llm", "store")
	}
	if c.LLM.PromptCache != nil && c.LLM.API != "anthropic" {
		return errAt(`applies only to api = "anthropic" (OpenAI and Gemini cache prompts by themselves)`, "llm", "prompt_cache")
	}
	if c.LLM.MaxOutputTokens < 0 {
		return errAt("must be positive (0: the API's default)", "llm", "max_output_tokens")
	}
	if c.Sandbox.MaxParallel < 0 {
		return errAt("must be positive", "sandbox", "max_parallel")
	}
	if c.Sandbox.Fuel < 0 {
		return errAt("must be positive (0: no fuel limit)", "sandbox", "fuel")
	}
	if c.Sandbox.MaxStack < 0 || c.Sandbox.MaxStack > 1<<30 {
		return errAt("must be between 0 (the default, 16MiB) and 1GiB", "sandbox", "max_stack")
	}
	if c.Sandbox.MaxCompiles < 0 || c.Sandbox.MaxCompiles > MaxCompilesLimit {
		return errAt(fmt.Sprintf("must be between 0 (the default: the CPUs, at most 4) and %d", MaxCompilesLimit), "sandbox", "max_compiles")
	}
	if c.Sandbox.MaxMeteredCode < 0 || c.Sandbox.MaxMeteredCode > MaxMeteredCodeLimit {
		return errAt("must be between 0 (the default, 32MiB) and 256MiB (a compile takes about 20 bytes per byte of it)", "sandbox", "max_metered_code")
	}
	if a := c.Cluster.TemporalAddress; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil || strings.Contains(a, "/") {
			return errAt(`must be host:port, e.g. "127.0.0.1:7233"`, "cluster", "temporal_address")
		}
	}
	switch c.Cluster.SessionStore {
	case "", "postgres":
	default:
		return errAt(`must be "" (the [sessions] dir) or "postgres"`, "cluster", "session_store")
	}
	if m := c.Cluster.ModuleStore; strings.Contains(m, "://") && !strings.HasPrefix(m, "s3://") {
		return errAt(`must be a directory or "s3://bucket/prefix"`, "cluster", "module_store")
	}
	if m, ok := strings.CutPrefix(c.Cluster.ModuleStore, "s3://"); ok && (m == "" || strings.HasPrefix(m, "/")) {
		return errAt(`"s3://" needs a bucket: "s3://bucket/prefix"`, "cluster", "module_store")
	}
	if e := c.Cluster.S3Endpoint; e != "" && !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
		return errAt("must be an http:// or https:// URL", "cluster", "s3_endpoint")
	}
	for _, m := range c.Cluster.Models {
		if strings.TrimSpace(m) == "" || len(m) > 200 {
			return errAt("each must be a model name (1 to 200 bytes)", "cluster", "models")
		}
	}
	if err := c.checkRegistries(errAt); err != nil {
		return err
	}
	if err := c.checkTenants(lines, errAt); err != nil {
		return err
	}
	return c.checkApprovals(errAt)
}

// checkGrantKeys checks the grant keys [tools.NAME] and [plugins.NAME]
// share (section names which): sha256, allowed_hosts, fuel.
func checkGrantKeys(t Tool, section, name string, errAt func(msg string, key ...string) error) error {
	if t.SHA256 != "" && !shaRE.MatchString(t.SHA256) {
		return errAt("sha256 must be 64 lowercase hex digits (as `agrun inspect` prints it)", section, name, "sha256")
	}
	for _, h := range t.AllowedHosts {
		if !hostRE.MatchString(h) {
			return errAt(fmt.Sprintf("allowed host %q: want a host name or host:port, without scheme or path", h), section, name, "allowed_hosts")
		}
	}
	if t.Fuel < 0 {
		return errAt("must be positive (0: the [sandbox] fuel)", section, name, "fuel")
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (c *Config) applyDefaults() {
	if c.LLM.API == "" {
		c.LLM.API = "chat"
	}
	def := APIDefaults[c.LLM.API]
	if c.LLM.BaseURL == "" {
		c.LLM.BaseURL = def.BaseURL
	}
	if c.LLM.APIKeyEnv == "" {
		c.LLM.APIKeyEnv = def.KeyEnv
	}
	if c.LLM.Model == "" {
		c.LLM.Model = def.Model
	}
	if c.LLM.MaxTurns == 0 {
		c.LLM.MaxTurns = 10
	}
	if c.LLM.Timeout == 0 {
		// A provider that trickles a byte a minute stays under the idle
		// timeout; this bounds one attempt however it streams.
		c.LLM.Timeout = Duration(DefaultLLMTimeout)
	}
	if c.Permissions.AllowUnspecified == nil && c.Permissions.Allowed == nil && c.Permissions.Denied == nil {
		d := permission.DefaultConfig()
		c.Permissions.Allowed, c.Permissions.Denied = d.Allowed, d.Denied
	}
	if c.Permissions.AllowUnspecified == nil {
		t := true
		c.Permissions.AllowUnspecified = &t
	}
	if c.Serve.Addr == "" {
		c.Serve.Addr = "127.0.0.1:8080"
	}
	if c.Serve.TokensEnv == "" {
		c.Serve.TokensEnv = "AGRUN_TOKENS"
	}
	if c.Serve.MaxUpload == 0 {
		c.Serve.MaxUpload = 16 << 20
	}
}

// PermissionConfig returns the [permissions] section as a permission.Config.
func (c *Config) PermissionConfig() permission.Config {
	return permission.Config{
		Allowed:          c.Permissions.Allowed,
		Denied:           c.Permissions.Denied,
		AllowUnspecified: c.Permissions.AllowUnspecified == nil || *c.Permissions.AllowUnspecified,
	}
}

func (c *Config) resolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		if strings.HasPrefix(p, "~/") {
			if h, err := os.UserHomeDir(); err == nil {
				return filepath.Join(h, p[2:])
			}
		}
		return filepath.Join(dir, p)
	}
	c.Sandbox.CacheDir = abs(c.Sandbox.CacheDir)
	c.Sessions.Dir = abs(c.Sessions.Dir)
	c.Serve.DataDir = abs(c.Serve.DataDir)
	c.OCI.Dir = abs(c.OCI.Dir)
	for name, t := range c.Tools {
		t.Wasm = abs(t.Wasm)
		t.Manifest = abs(t.Manifest)
		for i := range t.Mounts {
			t.Mounts[i].Host = abs(t.Mounts[i].Host)
		}
		c.Tools[name] = t
	}
	for name, t := range c.Plugins {
		t.Wasm = abs(t.Wasm)
		for i := range t.Mounts {
			t.Mounts[i].Host = abs(t.Mounts[i].Host)
		}
		c.Plugins[name] = t
	}
	for name, s := range c.MCP {
		s.Dir = abs(s.Dir)
		for i := range s.Roots {
			s.Roots[i] = abs(s.Roots[i])
		}
		if s.OAuth != nil && s.OAuth.PrivateKeyFile != "" {
			o := *s.OAuth
			o.PrivateKeyFile = abs(o.PrivateKeyFile)
			s.OAuth = &o
		}
		// A command given as a relative path (./server) is relative to the
		// config; a bare name (npx) is looked up in PATH.
		if strings.HasPrefix(s.Command, "./") || strings.HasPrefix(s.Command, "../") {
			s.Command = abs(s.Command)
		}
		c.MCP[name] = s
	}
}

// lineIndex finds the line of a key in a TOML text, for keys the decoder
// does not report positions for (unknown keys, semantic errors). It
// understands [table] and [[array]] headers and `key =` lines, which is how
// agrun.toml files are written; it returns 0 when it cannot tell.
type lineIndex struct {
	lines []string
}

func newLineIndex(s string) *lineIndex { return &lineIndex{lines: strings.Split(s, "\n")} }

var headerRE = regexp.MustCompile(`^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$`)
var keyRE = regexp.MustCompile(`^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.-]+)\s*=`)

func normKey(s string) string {
	var parts []string
	for _, p := range strings.Split(s, ".") {
		parts = append(parts, strings.Trim(strings.TrimSpace(p), `"'`))
	}
	return strings.Join(parts, ".")
}

func (li *lineIndex) find(key []string) int {
	want := strings.Join(key, ".")
	table := ""
	for i, l := range li.lines {
		if m := headerRE.FindStringSubmatch(l); m != nil {
			table = normKey(m[1])
			if table == want {
				return i + 1
			}
			continue
		}
		if m := keyRE.FindStringSubmatch(l); m != nil {
			full := normKey(m[1])
			if table != "" {
				full = table + "." + full
			}
			if full == want {
				return i + 1
			}
		}
	}
	// A parent's line is better than none.
	if len(key) > 1 {
		return li.find(key[:len(key)-1])
	}
	return 0
}

// Locate returns the config file to use: flagPath if set, else
// $AGRUN_CONFIG, else ./agrun.toml. explicit reports whether the user named
// the file (a missing explicit file is an error; a missing ./agrun.toml means
// Default()).
func Locate(flagPath string) (path string, explicit bool) {
	if flagPath != "" {
		return flagPath, true
	}
	if p := os.Getenv("AGRUN_CONFIG"); p != "" {
		return p, true
	}
	return "agrun.toml", false
}

// Find finds and loads the config: flagPath if set, else $AGRUN_CONFIG,
// else ./agrun.toml (Locate). A missing ./agrun.toml (not named by the
// user) gives Default(), with an empty Path; a named file that is
// missing is an error, as is one that does not decode (Load).
func Find(flagPath string) (*Config, error) {
	path, explicit := Locate(flagPath)
	if _, err := os.Stat(path); err != nil && !explicit && errors.Is(err, os.ErrNotExist) {
		return Default(), nil
	}
	return Load(path)
}
