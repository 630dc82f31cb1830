package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/agcore/agrun/internal/testing/hostile"
	"github.com/agcore/agrun/internal/testing/testrt"
	"github.com/agcore/agrun/runtime"
	"github.com/agcore/agrun/wasmtools"
)

// TestHostFunctionAbuse: out-of-range pointers and lengths, lengths near
// 2^32, pointer+length overflow — every one answered with an error code,
// none traps the host. The guest checks each answer itself and exits with
// the number of the first wrong one.
func TestHostFunctionAbuse(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	g := wasmtools.Grant{AllowedHosts: []string{"api.example.com"}, Limits: runtime.Limits{Timeout: 5 * time.Second}}
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "hostabuse"), "hostabuse", "network"), g))
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "respnopending"), "respsize", "network"), g))
	f.Register(t, f.Load(t, hostile.Pack(t, hostile.WAT(t, "hostabuse"), "hostabuse_ungranted", "network"), wasmtools.Grant{}))

	t.Run("bad pointers and lengths", func(t *testing.T) {
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "hostabuse", json.RawMessage(`{}`)))
		f.After(t, before, got, "")
		if got.Err == nil {
			hostile.JSONEqual(t, got.Out, `{"ok":true}`)
		}
	})
	t.Run("bad pointers without a grant", func(t *testing.T) {
		// The faults are answered before the grant is looked at: no
		// request was described, so nothing was "used".
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "hostabuse_ungranted", json.RawMessage(`{}`)))
		f.After(t, before, got, "")
	})
	t.Run("response buffer too small, then right, then twice", func(t *testing.T) {
		before := f.Snapshot(t)
		got := hostile.Inv(f.Reg.Invoke(context.Background(), "respsize", json.RawMessage(`{}`)))
		f.After(t, before, got, "")
		if got.Err == nil && !bytes.Contains(got.Out, []byte(`"forbidden"`)) {
			t.Errorf("response %s; want the forbidden answer", got.Out)
		}
	})
}

// TestModulesRefused: wrong import signatures, imports nobody declared,
// imported memories/tables/globals, proposals we do not enable, and
// non-commands are refused at load with a reason, and loading goes on
// working.
func TestModulesRefused(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	for _, c := range []struct{ file, reason string }{
		{"badsig_req", "signature"},
		{"badsig_log", "signature"},
		{"badsig_wasi", "signature"},
		{"undeclared_env", "not provided"},
		{"undeclared_agrun", "no such function"},
		{"undeclared_wasi", "no such function"},
		{"import_memory", "importing a memory"},
		{"import_table", "importing a table"},
		{"import_global", "importing a global"},
		{"threads", ""},
		{"memory64", ""},
		{"exceptions", ""},
		{"multimem", ""},
		{"reactor", "_start"},
		{"nomemory", "memory"},
	} {
		t.Run(c.file, func(t *testing.T) {
			before := f.Snapshot(t)
			_, err := wasmtools.Load(context.Background(), f.Rt, hostile.Pack(t, hostile.WAT(t, c.file), "refused"), wasmtools.Grant{})
			checkRefused(t, err, c.reason)
			f.After(t, before, hostile.Outcome{}, "")
		})
	}
}

// TestModulesMalformed: truncated and corrupt binaries and absurd section
// and vector counts fail fast with ErrCompile (the parser checks every
// count against the bytes left before allocating), never hang or allocate
// what the count claims.
func TestModulesMalformed(t *testing.T) {
	f := hostile.NewFixture(t, runtime.Config{})
	good := hostile.Pack(t, hostile.WordCountWasm(t), "good")
	header := []byte("\x00asm\x01\x00\x00\x00")
	leb := func(v uint32) []byte { return binary.AppendUvarint(nil, uint64(v)) }
	section := func(id byte, body []byte) []byte {
		return append(append([]byte{id}, leb(uint32(len(body)))...), body...)
	}
	mod := func(secs ...[]byte) []byte { return bytes.Join(append([][]byte{header}, secs...), nil) }
	cases := map[string][]byte{
		"empty":                         {},
		"magic only":                    header[:4],
		"wrong version":                 []byte("\x00asm\x02\x00\x00\x00"),
		"truncated at 1/3":              good[:len(good)/3],
		"truncated by one byte":         good[:len(good)-1],
		"section size past the end":     mod([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f}),
		"4 billion types":               mod(section(1, leb(0xffffffff))),
		"4 billion imports":             mod(section(2, leb(0xffffffff))),
		"4 billion functions":           mod(section(3, leb(0xffffffff))),
		"4 billion memories":            mod(section(5, leb(0xffffffff))),
		"4 billion exports":             mod(section(7, leb(0xffffffff))),
		"4 billion locals":              mod(section(1, []byte{1, 0x60, 0, 0}), section(3, []byte{1, 0}), section(10, append([]byte{1, 6}, append(leb(1), append(leb(0xffffffff), 0x7f, 0x0b)...)...))),
		"4 billion data segments":       mod(section(11, leb(0xffffffff))),
		"overlong LEB128":               mod([]byte{1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0}),
		"custom section name too long":  mod(section(0, leb(0xfffffff0))),
		"duplicate memory section":      mod(section(5, []byte{1, 0, 1}), section(5, []byte{1, 0, 1})),
		"sections out of order":         mod(section(7, []byte{0}), section(1, []byte{0})),
		"unknown section id":            mod(section(42, []byte{1, 2, 3})),
		"random bytes after the header": append(append([]byte{}, header...), bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 1000)...),
		"flipped byte in the code":      flipped(good, len(good)*2/3),
	}
	for name, wasm := range cases {
		t.Run(name, func(t *testing.T) {
			before := f.Snapshot(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang detector, not a timing assertion
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := wasmtools.LoadWithManifest(ctx, f.Rt, wasm, wasmtools.Manifest{Name: "bad", Description: "x"}, wasmtools.Grant{})
				done <- err
			}()
			select {
			case err := <-done:
				if name == "flipped byte in the code" && err == nil {
					return // a flip can leave a valid module; what matters is no crash
				}
				checkRefused(t, err, "")
			case <-ctx.Done():
				t.Fatal("compiling a malformed module did not finish")
			}
			f.After(t, before, hostile.Outcome{}, "")
		})
	}
	t.Run("over the module size limit", func(t *testing.T) {
		before := f.Snapshot(t)
		rt := testrt.New(t, runtime.Config{MaxModuleBytes: 1 << 20})
		_, err := wasmtools.LoadWithManifest(context.Background(), rt, append(append([]byte{}, header...), make([]byte, 2<<20)...), wasmtools.Manifest{Name: "big", Description: "x"}, wasmtools.Grant{})
		checkRefused(t, err, "")
		f.After(t, before, hostile.Outcome{}, "")
	})
}

func flipped(b []byte, i int) []byte {
	c := append([]byte{}, b...)
	c[i] ^= 0xff
	return c
}
