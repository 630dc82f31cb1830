package runtime

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"sort"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

// noMemory is a guest with no memory of its own, for calling the Extism
// host functions directly (only newBlock asks for the guest's memory).
type noMemory struct{ api.Module }

func (noMemory) Memory() api.Memory { return nil }

// FuzzExtismHost drives every Extism host function with arbitrary
// arguments, in arbitrary order, on one call's kernel: none may panic, and
// the arena must stay within the call's memory limit.
func FuzzExtismHost(f *testing.F) {
	f.Add([]byte{0, 16, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("\x00\x40\x00\x00\x00\x00\x00\x00\x00\x05\x08\x00\x00\x00\x00\x00\x00\x00\x07\x08\x00\x00\x00\x00\x00\x00\x00\xff"))
	f.Add([]byte("\x0e\xff\xff\xff\xff\xff\xff\xff\xff\x0f\x08\x00\x00\x00\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00"))
	names := make([]string, 0, len(extismFuncs))
	for n := range extismFuncs {
		names = append(names, n)
	}
	sort.Strings(names)
	r := &Runtime{cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	const limit = 1 << 20
	f.Fuzz(func(t *testing.T, ops []byte) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		st := &callState{r: r, module: "fuzz", cancel: cancel, lim: Limits{MemoryBytes: limit, MaxStdout: 4 << 10}}
		st.ext = newExtState([]byte(`{"input":1}`), &Plugin{Config: map[string]string{"k": "v"}})
		for len(ops) >= 17 && len(st.ext.blocks) < 4096 {
			name := names[int(ops[0])%len(names)]
			a, b := binary.LittleEndian.Uint64(ops[1:]), binary.LittleEndian.Uint64(ops[9:])
			ops = ops[17:]
			// Small addresses and sizes are the interesting ones: fold most
			// of them into the arena's range.
			if a>>63 == 0 {
				a %= 4 * limit
			}
			stack := []uint64{a, b}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("%s(%d, %d) panicked: %v", name, a, b, p)
					}
				}()
				extismFuncs[name](ctx, st, noMemory{}, stack)
			}()
			st.hostErr.Store(nil) // the guest would have stopped; go on fuzzing the state
			if held := st.ext.held(); held > 2*limit {
				t.Fatalf("after %s: the kernel holds %d bytes under a %d-byte limit", name, held, limit)
			}
		}
	})
}
