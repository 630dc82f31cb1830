package config

// Template is what `agrun init` writes: every section with its
// defaults, commented, and one example of each kind of tool. It decodes
// as is (cmd/agrun's TestInit).
const Template = `# agrun.toml: what agrun runs, and what each tool may do.
# Read from -c FILE, else $AGRUN_CONFIG, else ./agrun.toml. Relative paths
# are relative to this file's folder. Every key: docs/CONFIG.md.

[llm]
# api: chat (OpenAI Chat Completions, and every server that speaks it:
# DeepSeek, OpenRouter, vLLM, Ollama, ...) | responses (OpenAI Responses) |
# anthropic | gemini. base_url, api_key_env and model default per api, e.g.
# api = "anthropic" alone uses ANTHROPIC_API_KEY and claude-sonnet-4-5.
# Local servers need no key, e.g. Ollama: base_url = "http://127.0.0.1:11434/v1", model = "llama3.1".
api = "chat"
base_url = "https://api.openai.com/v1"
model = "gpt-4.1-mini"
api_key_env = "OPENAI_API_KEY"   # the variable holding the key (never the key itself)
max_turns = 10
# system = "You are a helpful assistant."
# reasoning = "medium"   # off | low | medium | high; unset: the API's default

[sandbox]
# cache_dir = ""        # compiled modules; default: the user cache dir + /agrun
timeout = "10s"         # per call
memory = "64MiB"        # guest memory
max_output = "1MiB"     # stdout cap (stderr is capped at 64KiB)
max_parallel = 8        # tool calls of one turn run at once

[permissions]
# A tool runs only if every permission it declares passes: denied wins,
# then allowed; with a non-empty allow-list nothing else passes.
allowed = ["read", "network"]
denied = ["delete", "shell"]
allow_unspecified = true   # tools that declare nothing (pure compute) may run

# One section per tool; the name is what the model calls. Examples:
#
# [tools.word_count]                  # pure compute: nothing to grant
# wasm = "tools/word_count.wasm"
#
# [tools.get_weather]                 # declares "network": only these hosts
# wasm = "tools/get_weather.wasm"
# allowed_hosts = ["api.open-meteo.com"]
# timeout = "15s"                     # per-tool limits: timeout, memory, max_output
#
# [tools.read_file]                   # declares "filesystem": only these folders
# wasm = "tools/read_file.wasm"       # (add "filesystem" to [permissions] allowed)
# mounts = ["./docs:/docs:ro"]        # HOST:GUEST[:MODE], MODE ro | rw | rwd
#
# [tools.published]                   # from an OCI registry: agrun pull REF prints this
# oci = "ghcr.io/acme/tool:1.0@sha256:..."   # pinned line; it loads from [oci] dir, offline
#
# MCP servers add their tools as <server>__<tool>:
# [mcp.everything]
# command = "npx"
# args = ["-y", "@modelcontextprotocol/server-everything"]
# permissions = ["read"]

[sessions]
# dir = ""              # default: $XDG_DATA_HOME/agrun/sessions

[serve]
addr = "127.0.0.1:8080"
tokens_env = "AGRUN_TOKENS"   # comma-separated bearer tokens; none = loopback only

# OpenTelemetry traces and metrics over OTLP/HTTP; off unless an endpoint
# is set here or in OTEL_EXPORTER_OTLP_ENDPOINT (docs/OBSERVABILITY.md).
# [telemetry]
# otlp_endpoint = "http://localhost:4318"
# headers_env = "AGRUN_OTLP_HEADERS"   # the variable holding "k=v,k2=v2"
# sampling = 1.0
# capture_content = false               # prompts, replies, tool arguments and results in spans
`
