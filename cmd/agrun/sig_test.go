package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/internal/testing/mddoc"
	"github.com/agcore/agrun/internal/testing/signtest"
)

// pushed runs `agrun push` of the testdata module file to host/repo:1
// and returns the manifest's digest.
func (e *testEnv) pushed(t *testing.T, file, ref string) string {
	t.Helper()
	r := e.run("", "push", filepath.Join(repoRoot(t), "testdata", file), ref).wantCode(t, exitOK)
	m := regexp.MustCompile(`(?m)^digest:  (sha256:[0-9a-f]{64})$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("push printed no digest:\n%s", r.stdout)
	}
	return m[1]
}

// TestSignToolExample runs README.md's "Sign it, and require the
// signature" as a user would, with the cosign steps done as cosign does
// them (signtest: a key pair made here, the signature pushed under the
// sha256-<hex>.sig tag): the pull, the [trust] block as written, and the
// call, offline.
func TestSignToolExample(t *testing.T) {
	t.Parallel()
	host, stop := startRegistry(t)
	sec := mddoc.Read(t, "README.md").Section(t, "### Sign it, and require the signature")
	sec.Text = strings.ReplaceAll(sec.Text, "localhost:5000", host)
	cmds := sec.ShellCmds()
	tomls := sec.Blocks("toml")
	if len(cmds) != 4 || len(tomls) != 1 {
		t.Fatalf("want cosign generate-key-pair, cosign sign, agrun pull, agrun call and one toml block; have %q", cmds)
	}
	e := newTestEnv(t, "", "\n[oci]\ndir = \"modules\"\n")
	digest := e.pushed(t, "word_count.wasm", host+"/tools/word_count:1.0")

	// cosign generate-key-pair: cosign.key and cosign.pub beside the config.
	if cmds[0].Line != "cosign generate-key-pair" {
		t.Fatalf("the first command: %q", cmds[0].Line)
	}
	key := signtest.NewKey(t)
	os.WriteFile(filepath.Join(e.dir, "cosign.pub"), key.PublicPEM, 0o644)
	// cosign sign --key cosign.key REF@sha256:DIGEST
	sign := mddoc.ShellWords(cmds[1].Line)
	if len(sign) != 5 || sign[1] != "sign" || sign[3] != "cosign.key" || sign[4] != host+"/tools/word_count:1.0@sha256:DIGEST" {
		t.Fatalf("the sign command: %q", sign)
	}
	payload := signtest.Payload(digest)
	signtest.PushCosign(t, host, "tools/word_count", digest, signtest.Sig{Payload: payload, Signature: key.Sign(payload)})

	r := e.run("", mddoc.ShellWords(cmds[2].Line)[1:]...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "signed:  1 signature kept") {
		t.Fatalf("pull does not say it kept the signature:\n%s", r.stdout)
	}
	cfg, _ := os.ReadFile(e.config)
	wasmLine := "[tools.word_count]\nwasm = " + quote(filepath.Join(repoRoot(t), "testdata/word_count.wasm")) + "\n"
	withSig := strings.Replace(string(cfg), wasmLine, "", 1) + "\n" + tomls[0] +
		"\n[tools.word_count]\noci = \"" + host + "/tools/word_count:1.0@" + digest + "\"\n"
	os.WriteFile(e.config, []byte(withSig), 0o644)
	stop() // offline from here
	call := mddoc.ShellWords(cmds[3].Line)
	r = e.run("", call[1:]...).wantCode(t, exitOK)
	if r.stdout != `{"words":6,"lines":1,"chars":18,"bytes":18}`+"\n" {
		t.Fatalf("a signed tool: %q (stderr %s)", r.stdout, r.stderr)
	}
	// The same [trust] and another key: refused, saying why.
	os.WriteFile(filepath.Join(e.dir, "cosign.pub"), signtest.NewKey(t).PublicPEM, 0o644)
	r = e.run("", "call", "--json", "word_count", `{"text":"a"}`).wantCode(t, exitUsage)
	if !strings.Contains(r.stdout, `"kind":"module_refused"`) || !strings.Contains(r.stdout, "refused by require_signature: not signed by a trusted key") {
		t.Fatalf("signed by another key: %s", r.stdout)
	}
	r = e.run("", "tools").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "not signed by a trusted key") {
		t.Fatalf("agrun tools does not show the refusal:\n%s", r.stdout)
	}
}

// TestRequireSignature: through the CLI, each case of a tool pulled from
// a registry with [trust] require_signature, and the per-tool override.
func TestRequireSignature(t *testing.T) {
	t.Parallel()
	host, _ := startRegistry(t)
	e := newTestEnv(t, "", "")
	key := signtest.NewKey(t)
	os.WriteFile(filepath.Join(e.dir, "cosign.pub"), key.PublicPEM, 0o644)
	signed := e.pushed(t, "word_count.wasm", host+"/tools/signed:1")
	p := signtest.Payload(signed)
	signtest.PushCosign(t, host, "tools/signed", signed, signtest.Sig{Payload: p, Signature: key.Sign(p)})
	unsigned := e.pushed(t, "sum_c.wasm", host+"/tools/unsigned:1")
	stranger := e.pushed(t, "read_file.wasm", host+"/tools/stranger:1")
	p = signtest.Payload(stranger)
	signtest.PushCosign(t, host, "tools/stranger", stranger, signtest.Sig{Payload: p, Signature: signtest.NewKey(t).Sign(p)})
	elsewhere := e.pushed(t, "write_note.wasm", host+"/tools/elsewhere:1")
	p = signtest.Payload(signed) // a good signature, of another manifest
	signtest.PushCosign(t, host, "tools/elsewhere", elsewhere, signtest.Sig{Payload: p, Signature: key.Sign(p)})

	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte(`
[oci]
dir = "modules"

[trust]
keys = ["cosign.pub"]
require_signature = true

[tools.signed]
oci = "`+host+`/tools/signed:1@`+signed+`"

[tools.unsigned]
oci = "`+host+`/tools/unsigned:1@`+unsigned+`"

[tools.unsigned_allowed]
oci = "`+host+`/tools/unsigned:1@`+unsigned+`"
require_signature = false

[tools.stranger]
oci = "`+host+`/tools/stranger:1@`+stranger+`"

[tools.elsewhere]
oci = "`+host+`/tools/elsewhere:1@`+elsewhere+`"
`)...), 0o644)
	for _, repo := range []string{"signed", "unsigned", "stranger", "elsewhere"} {
		e.run("", "pull", host+"/tools/"+repo+":1").wantCode(t, exitOK)
	}
	for _, c := range []struct{ tool, args, want string }{
		{"signed", `{"text":"a b"}`, `{"ok":true,"result":{"words":2,`},
		{"unsigned_allowed", `{"numbers":[1,2]}`, `{"ok":true,"result":`},
		{"unsigned", `{"a":1,"b":2}`, "refused by require_signature: no signature: "},
		{"stranger", `{"path":"/docs/hello.txt"}`, "refused by require_signature: not signed by a trusted key: 1 signature checked against 1 key"},
		{"elsewhere", `{"name":"n","text":"t"}`, "refused by require_signature: the signature is for another artifact: 1 signature checked against 1 key; it signs manifest " + signed + ", not " + elsewhere},
		{"word_count", `{"text":"a"}`, "refused by require_signature: no signature: a wasm file is verified by its sigstore bundle"},
	} {
		r := e.run("", "call", "--json", c.tool, c.args)
		if !strings.Contains(r.stdout, c.want) {
			t.Errorf("%s: %s (stderr %s), want %q", c.tool, r.stdout, r.stderr, c.want)
		}
		if !strings.HasPrefix(c.want, `{"ok":true`) && (r.code != exitUsage || !strings.Contains(r.stdout, `"kind":"module_refused"`)) {
			t.Errorf("%s: exit %d, %s: want module_refused", c.tool, r.code, r.stdout)
		}
	}
	// A tampered module in the store (the signature still names the
	// manifest it came in): refused, the store re-hashes what it reads.
	r := e.run("", "pull", "--json", host+"/tools/signed:1").wantCode(t, exitOK)
	var pulled struct {
		ModuleSHA256 string `json:"module_sha256"`
	}
	json.Unmarshal([]byte(r.stdout), &pulled)
	stored := filepath.Join(e.dir, "modules", "sha256", pulled.ModuleSHA256+".wasm")
	b, err := os.ReadFile(stored)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	os.WriteFile(stored, b, 0o644)
	r = e.run("", "call", "--json", "signed", `{"text":"a b"}`).wantCode(t, exitUsage)
	if !strings.Contains(r.stdout, `"kind":"module_refused"`) || !strings.Contains(r.stdout, "was changed") {
		t.Errorf("a tampered module under a good signature: %s", r.stdout)
	}

	// A file named on the command line is the operator's own choice.
	r = e.run("", "call", "--json", filepath.Join(repoRoot(t), "testdata", "word_count.wasm"), `{"text":"a"}`)
	if !strings.Contains(r.stdout, `"ok":true`) {
		t.Errorf("call FILE.wasm under require_signature: %s %s", r.stdout, r.stderr)
	}
}

// TestSignedWasmFile: a wasm = FILE tool with signature = its sigstore
// bundle.
func TestSignedWasmFile(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	wasmPath := filepath.Join(repoRoot(t), "testdata", "word_count.wasm")
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	b, pub := signtest.Bundle(t, wasm)
	os.WriteFile(filepath.Join(e.dir, "cosign.pub"), pub, 0o644)
	os.WriteFile(filepath.Join(e.dir, "wc.sigstore.json"), b, 0o644)
	other, _ := signtest.Bundle(t, append(wasm, 0))
	os.WriteFile(filepath.Join(e.dir, "other.sigstore.json"), other, 0o644)
	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte(`
[trust]
keys = ["cosign.pub"]

[tools.wc]
wasm = `+quote(wasmPath)+`
signature = "wc.sigstore.json"

[tools.wc_other]
wasm = `+quote(wasmPath)+`
signature = "other.sigstore.json"
`)...), 0o644)
	if r := e.run("", "call", "--json", "wc", `{"text":"a b"}`); !strings.Contains(r.stdout, `"ok":true`) {
		t.Fatalf("a wasm file with its bundle: %s %s", r.stdout, r.stderr)
	}
	if r := e.run("", "call", "--json", "word_count", `{"text":"a b"}`); !strings.Contains(r.stdout, `"ok":true`) {
		t.Fatalf("a wasm file without require_signature: %s %s", r.stdout, r.stderr)
	}
	r := e.run("", "call", "--json", "wc_other", `{"text":"a b"}`).wantCode(t, exitUsage)
	if !strings.Contains(r.stdout, "refused by its signature bundle: ") || !strings.Contains(r.stdout, "module_refused") {
		t.Fatalf("a bundle by another key, of another file: %s", r.stdout)
	}
}

// TestTrustConfigExample: docs/CONFIG.md's [trust] examples, as written,
// with the files they name made here: a key's bundle beside a module
// file, an exempt tool, an oci tool never pulled; and the keyless one,
// with a trusted root and a bundle signed as its identity.
func TestTrustConfigExample(t *testing.T) {
	t.Parallel()
	sec := mddoc.Read(t, "docs/CONFIG.md").Section(t, "## [trust] — whose signatures a module may carry")
	blocks := sec.Blocks("toml")
	if len(blocks) != 2 {
		t.Fatalf("want two toml blocks (keys, keyless); have %d", len(blocks))
	}
	wasm, err := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "word_count.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	setup := func(t *testing.T, block string) *testEnv {
		e := newTestEnv(t, "", "")
		os.MkdirAll(filepath.Join(e.dir, "tools"), 0o755)
		for _, f := range []string{"local_tool.wasm", "scratch.wasm"} {
			os.WriteFile(filepath.Join(e.dir, "tools", f), wasm, 0o644)
		}
		cfg, _ := os.ReadFile(e.config)
		wasmLine := "[tools.word_count]\nwasm = " + quote(filepath.Join(repoRoot(t), "testdata/word_count.wasm")) + "\n"
		os.WriteFile(e.config, []byte(strings.Replace(string(cfg), wasmLine, "", 1)+"\n"+block), 0o644)
		return e
	}

	t.Run("keys", func(t *testing.T) {
		e := setup(t, blocks[0])
		b, pub := signtest.Bundle(t, wasm)
		os.WriteFile(filepath.Join(e.dir, "cosign.pub"), pub, 0o644)
		os.WriteFile(filepath.Join(e.dir, "tools", "local_tool.wasm.sigstore.json"), b, 0o644)
		for _, tool := range []string{"local_tool", "scratch"} {
			if r := e.run("", "call", "--json", tool, `{"text":"a b"}`); !strings.Contains(r.stdout, `"ok":true`) {
				t.Errorf("%s: %s %s", tool, r.stdout, r.stderr)
			}
		}
		r := e.run("", "call", "--json", "word_count", `{"text":"a"}`).wantCode(t, exitUsage)
		if !strings.Contains(r.stdout, "module_refused") || !strings.Contains(r.stdout, "run `agrun pull ghcr.io/acme/word_count:1.0@sha256:") {
			t.Errorf("the oci tool never pulled: %s", r.stdout)
		}
		// Every other wasm tool of the config has no bundle: refused.
		r = e.run("", "call", "--json", "sum_c", `{"numbers":[1]}`).wantCode(t, exitUsage)
		if !strings.Contains(r.stdout, "refused by require_signature: no signature") {
			t.Errorf("a wasm tool without a bundle: %s", r.stdout)
		}
	})

	t.Run("keyless", func(t *testing.T) {
		block := blocks[1] + "\n[tools.local_tool]\nwasm = \"tools/local_tool.wasm\"\nsignature = \"tools/local_tool.wasm.sigstore.json\"\n"
		e := setup(t, block)
		ks := signtest.NewKeyless(t)
		os.WriteFile(filepath.Join(e.dir, "trusted_root.json"), ks.TrustedRoot(t), 0o644)
		os.WriteFile(filepath.Join(e.dir, "tools", "local_tool.wasm.sigstore.json"), nil, 0o644) // written below
		cfg, err := config.Load(e.config)
		if err != nil {
			t.Fatal(err)
		}
		id := cfg.Trust.Identities[0]
		os.WriteFile(filepath.Join(e.dir, "tools", "local_tool.wasm.sigstore.json"), ks.Bundle(t, id.Subject, id.Issuer, wasm), 0o644)
		if r := e.run("", "call", "--json", "local_tool", `{"text":"a b"}`); !strings.Contains(r.stdout, `"ok":true`) {
			t.Fatalf("signed keylessly as the example's identity: %s %s", r.stdout, r.stderr)
		}
		os.WriteFile(filepath.Join(e.dir, "tools", "local_tool.wasm.sigstore.json"), ks.Bundle(t, "mallory@example.com", id.Issuer, wasm), 0o644)
		r := e.run("", "call", "--json", "local_tool", `{"text":"a b"}`).wantCode(t, exitUsage)
		if !strings.Contains(r.stdout, "refused by require_signature: not signed by a trusted key") {
			t.Fatalf("signed keylessly as someone else: %s", r.stdout)
		}
	})
}

// TestPushSign: `agrun push --sign cosign.key` signs as it publishes
// (the key pair as cosign generate-key-pair writes it, its password from
// $COSIGN_PASSWORD), and the pulled tool loads under require_signature.
func TestPushSign(t *testing.T) {
	host, _ := startRegistry(t)
	e := newTestEnv(t, "", "\n[oci]\ndir = \"modules\"\n")
	priv, pub := signtest.CosignKeyPair(t, "s3cret")
	os.WriteFile(filepath.Join(e.dir, "cosign.key"), priv, 0o600)
	os.WriteFile(filepath.Join(e.dir, "cosign.pub"), pub, 0o644)
	wasm := filepath.Join(repoRoot(t), "testdata", "word_count.wasm")
	ref := host + "/tools/wc:1"

	t.Setenv("COSIGN_PASSWORD", "wrong")
	r := e.run("", "push", "--sign", filepath.Join(e.dir, "cosign.key"), wasm, ref).wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "a wrong password?") {
		t.Fatalf("a wrong password: %s", r.stderr)
	}
	t.Setenv("COSIGN_PASSWORD", "s3cret")
	r = e.run("", "push", "--sign", filepath.Join(e.dir, "cosign.key"), wasm, ref).wantCode(t, exitOK)
	m := regexp.MustCompile(`(?m)^digest:  sha256:([0-9a-f]{64})\nmodule:  .*\nsigned:  sha256-([0-9a-f]{64})\.sig \(`).FindStringSubmatch(r.stdout)
	if m == nil || m[1] != m[2] {
		t.Fatalf("push --sign:\n%s", r.stdout)
	}
	r = e.run("", "pull", ref).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "signed:  1 signature kept") {
		t.Fatalf("pull:\n%s", r.stdout)
	}
	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte("\n[trust]\nkeys = [\"cosign.pub\"]\n\n[tools.wc]\nrequire_signature = true\noci = \""+ref+"@sha256:"+m[1]+"\"\n")...), 0o644)
	if r := e.run("", "call", "--json", "wc", `{"text":"a b"}`); !strings.Contains(r.stdout, `"ok":true`) {
		t.Fatalf("a tool pushed with --sign: %s %s", r.stdout, r.stderr)
	}
}

// TestSignedPlugin: [plugins.NAME] takes require_signature and signature
// as [tools.NAME] does: the plug-in with its bundle lists its tools; one
// requiring a signature it lacks is refused (NAME__*, module_refused); a
// wasm plug-in required signed without a bundle is a config error.
func TestSignedPlugin(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, "", "")
	wasmPath := filepath.Join(repoRoot(t), "testdata", "plugins", "textkit.wasm")
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	b, pub := signtest.Bundle(t, wasm)
	os.WriteFile(filepath.Join(e.dir, "cosign.pub"), pub, 0o644)
	os.WriteFile(filepath.Join(e.dir, "kit.sigstore.json"), b, 0o644)
	other, _ := signtest.Bundle(t, append(wasm, 0))
	os.WriteFile(filepath.Join(e.dir, "other.sigstore.json"), other, 0o644)
	cfg, _ := os.ReadFile(e.config)
	os.WriteFile(e.config, append(cfg, []byte(`
[trust]
keys = ["cosign.pub"]

[plugins.kit]
wasm = `+quote(wasmPath)+`
signature = "kit.sigstore.json"

[plugins.forged]
wasm = `+quote(wasmPath)+`
signature = "other.sigstore.json"
`)...), 0o644)
	r := e.run("", "tools", "--json").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"name":"kit__reverse"`) {
		t.Fatalf("a signed plug-in: %s", r.stdout)
	}
	if !strings.Contains(r.stdout, `"name":"forged__*"`) || !strings.Contains(r.stdout, "refused by its signature bundle") {
		t.Fatalf("a plug-in with another file's bundle: %s", r.stdout)
	}
	e2 := newTestEnv(t, "", "\n[trust]\nkeys = [\""+filepath.Join(e.dir, "cosign.pub")+"\"]\n[plugins.kit]\nwasm = "+quote(wasmPath)+"\nrequire_signature = true\n")
	if r := e2.run("", "tools").wantCode(t, exitUsage); !strings.Contains(r.stderr, "plugins.kit.require_signature") {
		t.Fatalf("require_signature on a wasm plug-in without a bundle: %s", r.stderr)
	}
}
