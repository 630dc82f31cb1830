package runtime

import (
	"context"
	"errors"
	"io"
	"log/slog"
	goruntime "runtime"
	"strings"
	"testing"
)

// TestExtismBigBlocksAreNotCopied: a guest's block may be as large as its
// memory limit; config_get, var_get, var_set and http_request look at it
// in place and copy only what they keep, after its size check — so a key
// or a request of 8 MiB, passed again and again, costs the host no memory
// (a copy per call was host memory charged to nothing: issue 26 review).
func TestExtismBigBlocksAreNotCopied(t *testing.T) {
	r := &Runtime{cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	const limit = 64 << 20
	st := &callState{r: r, module: "copy", lim: Limits{MemoryBytes: limit, MaxStdout: 4 << 10}}
	st.ext = newExtState(nil, &Plugin{Config: map[string]string{"k": "v"}})
	big, ok := st.newBlock(noMemory{}, "test", 8<<20)
	if !ok {
		t.Fatal("no 8 MiB block")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	st.cancel = cancel
	var ms0, ms1 goruntime.MemStats
	goruntime.ReadMemStats(&ms0)
	for range 10 {
		extismFuncs["config_get"](ctx, st, noMemory{}, []uint64{big, 0})
	}
	goruntime.ReadMemStats(&ms1)
	if grew := ms1.TotalAlloc - ms0.TotalAlloc; grew > 1<<20 {
		t.Errorf("10 config_get of an 8 MiB key allocated %d bytes", grew)
	}
	goruntime.ReadMemStats(&ms0)
	extismFuncs["var_get"](ctx, st, noMemory{}, []uint64{big, 0}) // frees the key block, as Extism's does
	goruntime.ReadMemStats(&ms1)
	if grew := ms1.TotalAlloc - ms0.TotalAlloc; grew > 1<<20 {
		t.Errorf("var_get of an 8 MiB key allocated %d bytes", grew)
	}
	if big, ok = st.newBlock(noMemory{}, "test", 8<<20); !ok {
		t.Fatal("no 8 MiB block")
	}
	// var_set of an 8 MiB value: refused on its size, nothing copied.
	key, _ := st.writeBlock(noMemory{}, "test", []byte("key"))
	goruntime.ReadMemStats(&ms0)
	extismFuncs["var_set"](ctx, st, noMemory{}, []uint64{key, big})
	goruntime.ReadMemStats(&ms1)
	if err := st.hostErr.Load(); err == nil || !errors.Is(*err, ErrMemoryLimit) {
		t.Fatalf("var_set of 8 MiB: %v, want the vars' limit", deref(err))
	}
	if grew := ms1.TotalAlloc - ms0.TotalAlloc; grew > 1<<20 {
		t.Errorf("var_set of 8 MiB allocated %d bytes before refusing it", grew)
	}
	// http_request of 8 MiB: refused on its size before any copy.
	st.hostErr.Store(nil)
	goruntime.ReadMemStats(&ms0)
	extismFuncs["http_request"](ctx, st, noMemory{}, []uint64{big, 0})
	goruntime.ReadMemStats(&ms1)
	if err := st.hostErr.Load(); err == nil || !strings.Contains((*err).Error(), "at most") {
		t.Fatalf("http_request of 8 MiB: %v", deref(err))
	}
	if grew := ms1.TotalAlloc - ms0.TotalAlloc; grew > 1<<20 {
		t.Errorf("http_request of 8 MiB allocated %d bytes before refusing it", grew)
	}
}

// TestExtismHTTPErrorIsTheHosts: a refused request's error shows the URL's
// host without its user info, and no guest bytes outside printable ASCII
// or past the caps.
func TestExtismHTTPErrorIsTheHosts(t *testing.T) {
	if got := hostOf("https://svc:SECRET@api.example.com:8443/x?y"); got != "api.example.com:8443" {
		t.Errorf("hostOf: %q", got)
	}
	if got := hostOf("not a url \x1b[2J"); got != "?" {
		t.Errorf("hostOf of junk: %q", got)
	}
	if got := printableCut("a\x1b[31mb\nc"+strings.Repeat("x", 600), 10); got != "a?[31mb?cx" {
		t.Errorf("printableCut: %q", got)
	}
}

func deref(p *error) error {
	if p == nil {
		return nil
	}
	return *p
}
