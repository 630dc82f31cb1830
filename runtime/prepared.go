package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"

	"github.com/agcore/agrun/internal/atomicfile"
	"github.com/agcore/agrun/internal/wasmbin"
)

// A prepared module is what agrun's own compile steps make of a module's
// bytes before wazero sees them: the verdict of validate, the memory
// image, the snapshot exports, the metering rewrite, and what Module
// reports (imports, exports, memories, custom sections). Computing it
// parses the module twice and rewrites every function: on a warm start of
// a new process (wazero's compiled code already in the disk cache) that
// was two thirds of the time to a tool's first call. With the disk cache
// on, it is kept beside wazero's cache, keyed by the module's SHA-256 and
// everything else its content depends on (preparedKey), and a later
// process starts from it.
//
// Trust: the file is read from the operator's cache directory, like
// wazero's compiled machine code next to it, which is already trusted to
// be what wazero wrote; a file that is torn, truncated, of another
// version or otherwise unreadable (CRC-32C over the whole file, lengths
// checked) is ignored and the module prepared again.

// preparedVersion names the output of the compile steps above for a given
// input. Bump it whenever that output may change (wasmbin's Parse,
// Instrument, AddExports, StripSections, MergeData; buildImage;
// newSnapshotter; validate's rules): TestPreparedGolden fails until you
// do, so that no process reuses what an older agrun prepared.
const preparedVersion = 4

// preparedMagic starts every prepared file.
const preparedMagic = "agrun-prepared\n"

// preparedDirName is the folder of prepared modules in the cache directory.
const preparedDirName = "agrun-prepared"

// preparedHeader is the JSON header of a prepared file; the compiled
// module's bytes and the memory image follow it.
type preparedHeader struct {
	Version  int              `json:"version"`
	Key      string           `json:"key"`
	Reactor  bool             `json:"reactor"`
	Snapshot bool             `json:"snapshot"`
	Globals  []string         `json:"globals,omitempty"`
	HasImage bool             `json:"has_image"`
	Imports  []wasmbin.Import `json:"imports"`
	Exports  []wasmbin.Export `json:"exports"`
	Memories []wasmbin.Limits `json:"memories"`
	Customs  []wasmbin.Custom `json:"customs"`
	BinLen   int              `json:"bin_len"`
	ImageLen int              `json:"image_len"`
}

// buildIdentity names this build of agrun and wazero for preparedKey:
// their module versions when built as a dependency, else the main
// module's VCS revision (a dirty tree adds nothing the version constant
// does not already cover).
var buildIdentity = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s", bi.GoVersion, bi.Main.Version)
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
			fmt.Fprintf(&b, " %s=%s", s.Key, s.Value)
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/agcore/agrun" || d.Path == "github.com/tetratelabs/wazero" {
			fmt.Fprintf(&b, " %s@%s", d.Path, d.Version)
		}
	}
	return b.String()
})

// preparedKey is the name of sum's prepared file under r's configuration:
// what validate and Instrument read of the Config, the format version and
// the build.
func (r *Runtime) preparedKey(sum [32]byte) string {
	h := sha256.New()
	h.Write(sum[:])
	fmt.Fprintf(h, "|v%d|%s|mem %d|tables %d|stack %d|metered code %d", preparedVersion, buildIdentity(),
		r.cfg.Limits.MemoryBytes, r.cfg.MaxTableElements, r.cfg.MaxStackBytes, r.cfg.MaxMeteredCodeBytes)
	return hex.EncodeToString(h.Sum(nil))
}

func (r *Runtime) preparedPath(key string) string {
	return filepath.Join(r.preparedDir, key+".bin")
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// encodePrepared renders a prepared module: magic, header length (u32
// LE), header JSON, bin, image, CRC-32C of everything before it (u32 LE).
func encodePrepared(key string, info *moduleInfo, bin, image []byte) ([]byte, error) {
	h := preparedHeader{
		Version:  preparedVersion,
		Key:      key,
		Reactor:  info.reactor,
		Snapshot: info.snap != nil,
		HasImage: info.image != nil,
		Imports:  info.Imports,
		Exports:  info.Exports,
		Memories: info.Memories,
		Customs:  info.Customs,
		BinLen:   len(bin),
		ImageLen: len(image),
	}
	if info.snap != nil {
		h.Globals = info.snap.globals
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(preparedMagic)+4+len(hj)+len(bin)+len(image)+4)
	out = append(out, preparedMagic...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(hj)))
	out = append(out, hj...)
	out = append(out, bin...)
	out = append(out, image...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, crcTable)), nil
}

var errBadPrepared = errors.New("not a prepared module of this version")

// decodePrepared is the inverse of encodePrepared. The returned slices
// alias data.
func decodePrepared(data []byte, key string) (*moduleInfo, []byte, error) {
	if len(data) < len(preparedMagic)+8 || string(data[:len(preparedMagic)]) != preparedMagic {
		return nil, nil, errBadPrepared
	}
	body, tail := data[:len(data)-4], data[len(data)-4:]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(tail) {
		return nil, nil, fmt.Errorf("%w: checksum mismatch", errBadPrepared)
	}
	rest := body[len(preparedMagic):]
	hl := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(hl) > uint64(len(rest)) {
		return nil, nil, errBadPrepared
	}
	var h preparedHeader
	if err := json.Unmarshal(rest[:hl], &h); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errBadPrepared, err)
	}
	rest = rest[hl:]
	if h.Version != preparedVersion || h.Key != key || h.BinLen < 0 || h.ImageLen < 0 || h.BinLen+h.ImageLen != len(rest) || len(h.Memories) == 0 {
		return nil, nil, errBadPrepared
	}
	info := &moduleInfo{
		Module:  &wasmbin.Module{Imports: h.Imports, Exports: h.Exports, Memories: h.Memories},
		reactor: h.Reactor,
	}
	info.Customs = h.Customs
	if h.HasImage {
		// A copy, so that data (the compiled module's bytes too) can be
		// freed once wazero has compiled it.
		info.image = dataImage(bytes.Clone(rest[h.BinLen:]))
	}
	if h.Snapshot {
		info.snap = &snapshotter{globals: h.Globals, entries: map[string]*snapEntry{}}
	}
	return info, rest[:h.BinLen], nil
}

// loadPrepared returns the prepared module of key, or false if there is
// none usable.
func (r *Runtime) loadPrepared(key string) (*moduleInfo, []byte, bool) {
	if r.preparedDir == "" {
		return nil, nil, false
	}
	data, err := os.ReadFile(r.preparedPath(key))
	if err != nil {
		return nil, nil, false
	}
	info, bin, err := decodePrepared(data, key)
	if err != nil {
		r.cfg.Logger.Debug("ignoring a prepared module", "file", r.preparedPath(key), "err", err)
		return nil, nil, false
	}
	return info, bin, true
}

// storePrepared writes the prepared module of key; a failure only costs
// the next process the work.
func (r *Runtime) storePrepared(key string, info *moduleInfo, bin, image []byte) {
	if r.preparedDir == "" {
		return
	}
	data, err := encodePrepared(key, info, bin, image)
	if err == nil {
		if err = os.MkdirAll(r.preparedDir, 0o700); err == nil {
			err = atomicfile.WriteFile(r.preparedPath(key), data, 0o600)
		}
	}
	if err != nil {
		r.cfg.Logger.Debug("could not keep a prepared module", "err", err)
	}
}
