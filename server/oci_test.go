package server_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/agcore/agrun/oci"
	"github.com/agcore/agrun/server"
)

// TestUploadByOCI: {"oci": REF} uploads the module REF names, only from
// the registries the operator allows, only pinned; a registry not listed
// is never contacted.
func TestUploadByOCI(t *testing.T) {
	var hits atomic.Int64
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); h.ServeHTTP(w, r) }))
	defer reg.Close()
	u, _ := url.Parse(reg.URL)
	host := u.Host
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the server reached a registry it does not allow: %s", r.URL)
	}))
	defer other.Close()
	ou, _ := url.Parse(other.URL)

	st, err := oci.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cl := &oci.Client{Store: st}
	pushed, err := cl.Push(context.Background(), okTool(t, "from_oci"), host+"/tools/ok:1")
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, setup{opts: server.Options{OCI: cl, AllowedRegistries: []string{host}}})
	send := func(body string) response {
		return ts.request("POST", "/v1/tools", "application/json", []byte(body))
	}
	for _, c := range []struct {
		name, body string
		status     int
		kind       server.Kind
		says       string
	}{
		{"a tag alone", `{"oci":"` + host + `/tools/ok:1"}`, 400, server.KindBadRequest, "names no digest"},
		{"a registry not listed", `{"oci":"` + ou.Host + `/tools/ok@` + pushed.Digest + `"}`, 403, server.KindForbidden, "allowed_registries"},
		{"not a reference", `{"oci":"ok"}`, 400, server.KindBadRequest, "not a valid OCI reference"},
		{"unknown field", `{"oci":"` + pushed.Pinned + `","url":"http://x"}`, 400, server.KindBadRequest, `application/json is`},
		{"a digest the registry lacks", `{"oci":"` + host + `/tools/ok@sha256:` + strings.Repeat("0", 64) + `"}`, 502, server.KindRegistry, "pull "},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := send(c.body)
			if r.status != c.status || r.errorKind(t) != c.kind || !strings.Contains(string(r.body), c.says) {
				t.Fatalf("%d %s; want %d %s saying %q", r.status, r.body, c.status, c.kind, c.says)
			}
		})
	}
	noneListed := startServer(t, setup{opts: server.Options{OCI: cl}})
	if r := noneListed.request("POST", "/v1/tools", "application/json", []byte(`{"oci":"`+pushed.Pinned+`"}`)); r.status != http.StatusForbidden {
		t.Fatalf("OCI upload with no registry allowed: %d %s", r.status, r.body)
	}
	before := hits.Load()
	r := send(`{"oci":"` + pushed.Pinned + `"}`)
	if r.status != http.StatusCreated || hits.Load() == before {
		t.Fatalf("upload by OCI: %d %s", r.status, r.body)
	}
	var info server.ToolInfo
	r.json(t, &info)
	if info.Name != "from_oci" || info.SHA256 != pushed.ModuleSHA256 {
		t.Fatalf("uploaded %+v, pushed %+v", info, pushed)
	}
	if r := ts.call("from_oci", `{}`); r.status != http.StatusOK {
		t.Fatalf("call of the tool uploaded by OCI: %d %s", r.status, r.body)
	}
	// A refused upload (a module with no manifest) leaves nothing in the
	// client's store, nor in a scratch folder: pulls for uploads go to a
	// scratch store removed when the upload is decided.
	bare, err := cl.Push(context.Background(), []byte("\x00asm\x01\x00\x00\x00"), host+"/tools/bare:1")
	if err != nil {
		t.Fatal(err)
	}
	tmpBefore, _ := filepath.Glob(filepath.Join(os.TempDir(), "agrun-oci-upload-*"))
	if r := send(`{"oci":"` + bare.Pinned + `"}`); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("upload of a module without a manifest: %d %s", r.status, r.body)
	}
	if _, _, err := st.Module(context.Background(), bare.Digest); err == nil {
		t.Error("a refused upload's module was kept in the client's store")
	}
	if _, _, err := st.Module(context.Background(), pushed.Digest); err == nil {
		t.Error("an accepted upload's module was kept in the client's store (the server keeps its own copy)")
	}
	if tmpAfter, _ := filepath.Glob(filepath.Join(os.TempDir(), "agrun-oci-upload-*")); len(tmpAfter) > len(tmpBefore) {
		t.Errorf("scratch folders left: %v", tmpAfter)
	}

	// Without OCI configured, a JSON upload is the wrong media type, as
	// before OCI uploads existed.
	plain := startServer(t, setup{})
	r = plain.request("POST", "/v1/tools", "application/json", []byte(`{"oci":"`+pushed.Pinned+`"}`))
	if r.status != http.StatusUnsupportedMediaType || r.errorKind(t) != server.KindUnsupportedMedia {
		t.Fatalf("OCI upload to a server without OCI: %d %s", r.status, r.body)
	}
}
