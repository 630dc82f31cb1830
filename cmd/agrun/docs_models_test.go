package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/cli/setup"
	"github.com/agcore/agrun/internal/testing/mddoc"
	"github.com/agcore/agrun/internal/testing/providertest"
)

// llmBlocks are the ```toml blocks of a document that start with [llm].
func llmBlocks(t *testing.T, doc string) []string {
	t.Helper()
	var out []string
	for _, b := range mddoc.Read(t, doc).Blocks("toml") {
		if strings.HasPrefix(b, "[llm]") {
			out = append(out, b)
		}
	}
	return out
}

// The model configs README.md and docs/CONFIG.md show, as a user copies
// them: each parses, names a key variable, and runs a prompt with
// agrun run against a fake server of its API (base_url pointed at it).
func TestModelConfigsInDocs(t *testing.T) {
	baseURL := regexp.MustCompile(`(?m)^base_url = .*\n`)
	for doc, least := range map[string]int{"README.md": 5, "docs/CONFIG.md": 6} {
		blocks := llmBlocks(t, doc)
		if len(blocks) < least {
			t.Fatalf("%s: %d [llm] examples, want at least %d (OpenAI, Anthropic, Gemini, DeepSeek, a local server)", doc, len(blocks), least)
		}
		for i, block := range blocks {
			cfg, err := config.Parse("example.toml", []byte(block))
			if err != nil {
				t.Errorf("%s example %d: %v\n%s", doc, i+1, err, block)
				continue
			}
			kit, ok := providertest.Kits[cfg.LLM.API]
			if !ok {
				t.Errorf("%s example %d: no kit for api %q", doc, i+1, cfg.LLM.API)
				continue
			}
			local := setup.IsLoopbackURL(cfg.LLM.BaseURL)
			if !local && !strings.Contains(block, cfg.LLM.APIKeyEnv) {
				t.Errorf("%s example %d: the key variable %s is not named in the example", doc, i+1, cfg.LLM.APIKeyEnv)
			}
			f := kit.Serve(t, providertest.Step{Text: "ok"})
			e := newTestEnv(t, f.URL(), "")
			full, _ := os.ReadFile(e.config)
			rest := string(full[strings.Index(string(full), "[sandbox]"):])
			llm := baseURL.ReplaceAllString(block, "")
			llm = strings.Replace(llm, "[llm]", "[llm]\nbase_url = \""+f.URL()+"\"", 1)
			if err := os.WriteFile(e.config, []byte(llm+"\n"+rest), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv(cfg.LLM.APIKeyEnv, "sk-docs")
			r := e.run("", "run", "-q", "hi")
			if r.code != exitOK || r.stdout != "ok\n" {
				t.Errorf("%s example %d (api %s): exit %d, stdout %q, stderr %q", doc, i+1, cfg.LLM.API, r.code, r.stdout, r.stderr)
			}
			if !local {
				if got := f.Header(0).Get(kit.KeyHeader); got != kit.KeyValue("sk-docs") {
					t.Errorf("%s example %d: %s %q", doc, i+1, kit.KeyHeader, got)
				}
			}
		}
	}
}
