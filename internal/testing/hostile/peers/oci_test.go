package peers

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
)

// The OCI section: a hostile registry against the built `agrun pull`.
// Each answer abuses one bound (an endless manifest, a layer claiming
// a terabyte, a body longer than its descriptor, a gzip bomb in a
// plug-in image, a manifest of the wrong media type or of two layers);
// the pull must fail with a clear message fit for a terminal, in bounded
// memory (the child's peak RSS), storing no module.

// hostileRegistry serves one repository, x/y, tag 1, whose manifest and
// blobs are what serve says (path -> handler); the rest of the
// distribution API answers 404.
func hostileRegistry(t *testing.T, serve map[string]http.HandlerFunc) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		for prefix, h := range serve {
			if strings.HasPrefix(r.URL.Path, prefix) {
				h(w, r)
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return "localhost:" + u.Port()
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// manifestOf is an OCI manifest of layers (media type, digest, size).
func manifestOf(mediaType string, layers ...[3]string) []byte {
	var ls []string
	for _, l := range layers {
		ls = append(ls, fmt.Sprintf(`{"mediaType":%q,"digest":%q,"size":%s}`, l[0], l[1], l[2]))
	}
	return []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[%s]}`,
		mediaType, strings.Join(ls, ",")))
}

func serveManifest(m []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", digestOf(m))
		w.Header().Set("Content-Length", fmt.Sprint(len(m)))
		if r.Method != http.MethodHead {
			w.Write(m)
		}
	}
}

// endless writes zeros until the client goes away.
func endless(w http.ResponseWriter, r *http.Request) {
	buf := make([]byte, 64<<10)
	for r.Context().Err() == nil {
		if _, err := w.Write(buf); err != nil {
			return
		}
	}
}

func TestOCIHostileRegistry(t *testing.T) {
	const toolLayer = "application/vnd.agrun.tool.v1+wasm"
	wasm := []byte("\x00asm\x01\x00\x00\x00")
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	hdr := make([]byte, 512) // a tar header for plugin.wasm of 256 MiB, then zeros
	copy(hdr, "plugin.wasm")
	copy(hdr[100:], "0000644\x00")
	copy(hdr[124:], fmt.Sprintf("%011o\x00", 256<<20))
	copy(hdr[156:], "0")
	copy(hdr[257:], "ustar\x0000")
	sum := 0
	copy(hdr[148:156], "        ")
	for _, c := range hdr {
		sum += int(c)
	}
	copy(hdr[148:], fmt.Sprintf("%06o\x00 ", sum))
	zw.Write(hdr)
	zeros := make([]byte, 1<<20)
	for range 256 {
		zw.Write(zeros)
	}
	zw.Close()
	bombLayer := bomb.Bytes()

	for _, c := range []struct {
		name  string
		serve map[string]http.HandlerFunc
		want  string
	}{
		{"endless manifest", map[string]http.HandlerFunc{"/v2/x/y/manifests/": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			if r.Method == http.MethodHead {
				w.Header().Set("Content-Length", "1000")
				return
			}
			endless(w, r)
		}}, "pull localhost"}, // capped at 1 MiB; oras then falls back to HEAD, refused too
		{"a layer claiming a terabyte", map[string]http.HandlerFunc{
			"/v2/x/y/manifests/": serveManifest(manifestOf("application/vnd.oci.image.manifest.v1+json", [3]string{toolLayer, digestOf(wasm), fmt.Sprint(int64(1) << 40)})),
			"/v2/x/y/blobs/":     endless,
		}, "layer"},
		{"a blob longer than its descriptor", map[string]http.HandlerFunc{
			"/v2/x/y/manifests/": serveManifest(manifestOf("application/vnd.oci.image.manifest.v1+json", [3]string{toolLayer, digestOf(wasm), fmt.Sprint(len(wasm))})),
			"/v2/x/y/blobs/":     endless,
		}, "digest"},
		{"a gzip bomb as plugin.wasm", map[string]http.HandlerFunc{
			"/v2/x/y/manifests/": serveManifest(manifestOf("application/vnd.oci.image.manifest.v1+json", [3]string{"application/vnd.oci.image.layer.v1.tar+gzip", digestOf(bombLayer), fmt.Sprint(len(bombLayer))})),
			"/v2/x/y/blobs/": func(w http.ResponseWriter, r *http.Request) {
				w.Write(bombLayer)
			},
		}, "limit"},
		{"two layers", map[string]http.HandlerFunc{
			"/v2/x/y/manifests/": serveManifest(manifestOf("application/vnd.oci.image.manifest.v1+json",
				[3]string{toolLayer, digestOf(wasm), fmt.Sprint(len(wasm))}, [3]string{toolLayer, digestOf(wasm), fmt.Sprint(len(wasm))})),
		}, "layer"},
		{"a wrong media type", map[string]http.HandlerFunc{
			"/v2/x/y/manifests/": serveManifest(manifestOf("application/vnd.oci.image.manifest.v1+json", [3]string{"text/html\x1b[31m", digestOf(wasm), fmt.Sprint(len(wasm))})),
		}, "media type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			host := hostileRegistry(t, c.serve)
			e := hostile.NewCLIEnv(t, "", "\n[oci]\ndir = \"modules\"\n")
			cmd := exec.Command(hostile.AgrunBinary(t), "-c", e.Config, "pull", host+"/x/y:1")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				<-done
				t.Fatalf("agrun pull did not end within 2 minutes")
			}
			if cmd.ProcessState.ExitCode() == 0 {
				t.Fatalf("agrun pull succeeded: %s", out.String())
			}
			hostile.CheckTerminalSafe(t, "stderr", errb.Bytes())
			if !strings.Contains(strings.ToLower(errb.String()), c.want) {
				t.Errorf("stderr %q, want it to mention %q", hostile.Truncate(errb.String(), 500), c.want)
			}
			// ru_maxrss counts what the child was at fork (this test
			// process) too: compared with a child that does nothing.
			if peak, base := maxRSS(cmd), idleRSS(t); peak > base+128<<10 {
				t.Errorf("agrun pull peaked at %d MiB RSS, an idle agrun at %d MiB", peak>>10, base>>10)
			}
			if mods, _ := filepath.Glob(filepath.Join(filepath.Dir(e.Config), "modules", "sha256", "*.wasm")); len(mods) != 0 {
				t.Errorf("a refused pull stored %v", mods)
			}
			t.Logf("%s: refused after %s: %s", c.name, time.Since(start).Round(time.Millisecond), hostile.Truncate(strings.TrimSpace(errb.String()), 300))
		})
	}
}

// maxRSS is a finished child's peak RSS in KiB (ru_maxrss).
func maxRSS(cmd *exec.Cmd) int64 {
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}

// idleRSS is the peak RSS of `agrun --version` started from this process
// now, in KiB: the part of ru_maxrss that is not the child's own work.
func idleRSS(t *testing.T) int64 {
	cmd := exec.Command(hostile.AgrunBinary(t), "--version")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return maxRSS(cmd)
}
