package wasmtools

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/agcore/agrun/internal/wasmbin"
)

// Info describes a module, as `agrun inspect` prints it.
type Info struct {
	// Manifest is the decoded agrun.manifest section, or nil if the module
	// has none or it is malformed.
	Manifest *Manifest `json:"manifest"`
	// ManifestError says why the manifest section was refused (a
	// *ManifestError), or is nil.
	ManifestError error `json:"-"`
	// SHA256 is the lowercase hex SHA-256 of the whole file, the value a
	// config's sha256 pin compares against.
	SHA256 string `json:"sha256"`
	// Size is the file's length in bytes.
	Size int `json:"size"`
	// Imports lists the module's imports in order.
	Imports []Import `json:"imports"`
	// Exports lists the module's exports in order.
	Exports []Export `json:"exports"`
	// Memories lists imported then defined memories, with limits in
	// 64 KiB pages.
	Memories []Memory `json:"memories"`
	// Tables lists imported then defined tables, with limits in elements.
	Tables []Table `json:"tables"`
	// CustomSections lists the names of the custom sections in order.
	CustomSections []string `json:"custom_sections"`
}

// Import is one import of a module.
type Import struct {
	Module string `json:"module"`
	Name   string `json:"name"`
	// Kind is "func", "table", "memory", "global" or "tag".
	Kind string `json:"kind"`
	// Signature describes the import's type: "(i32, i32) -> i32" for a
	// function, "funcref min 1, no max" for a table, "min 1, max 16" for a
	// memory, "mut i32" for a global.
	Signature string `json:"signature"`
}

// Export is one export of a module.
type Export struct {
	Name string `json:"name"`
	// Kind is "func", "table", "memory", "global" or "tag".
	Kind string `json:"kind"`
	// Signature is the function type of an exported function (as in
	// Import), else "".
	Signature string `json:"signature,omitempty"`
}

// Bounds are the size limits a module declares for a memory (in 64 KiB
// pages) or a table (in elements). Max is nil when the module declares no
// maximum. (The sandbox's limits of a call are runtime.Limits.)
type Bounds struct {
	Min    uint32  `json:"min"`
	Max    *uint32 `json:"max"`
	Shared bool    `json:"shared,omitempty"`
}

// Memory is a linear memory of a module.
type Memory struct {
	Bounds
	Imported bool `json:"imported,omitempty"`
}

// String renders bounds as "min 1, max 10" or "min 1, no max".
func (l Bounds) String() string {
	s := fmt.Sprintf("min %d, ", l.Min)
	if l.Max == nil {
		s += "no max"
	} else {
		s += fmt.Sprintf("max %d", *l.Max)
	}
	if l.Shared {
		s += ", shared"
	}
	return s
}

// boundsOf converts limits as wasmbin reads them.
func boundsOf(l wasmbin.Limits) Bounds {
	out := Bounds{Min: l.Min, Shared: l.Shared}
	if l.HasMax {
		out.Max = &l.Max
	}
	return out
}

// Table is a table of a module.
type Table struct {
	Bounds
	// ElemType is "funcref" or "externref".
	ElemType string `json:"elem_type"`
	Imported bool   `json:"imported,omitempty"`
	// Grows: the code names the table in a table.grow or table.fill
	// instruction, so the runtime requires it to declare a maximum within
	// its table limit. Inspect learns it by decoding the code section as
	// the runtime does; code the runtime cannot decode (instructions
	// outside WebAssembly 2.0), which Load refuses anyway, leaves Grows
	// false for every table rather than making Inspect fail.
	Grows bool `json:"grows,omitempty"`
}

// Inspect describes a module without compiling it: its manifest, hash,
// size, imports, exports, memories and tables. It checks only the module's
// outer structure and the sections it describes, not what the runtime
// alone requires (section order, WebAssembly 2.0 only, function bodies),
// so it describes modules Load would refuse; it also decodes the code
// section to tell which tables the code grows (see Table.Grows), without
// failing when it cannot. It works in time and memory bounded by the
// module's size, so it is safe on untrusted bytes. A malformed module is an
// error wrapping ErrMalformed; a malformed manifest is not an error of
// Inspect but is reported in Info.ManifestError.
func Inspect(wasm []byte) (Info, error) {
	info, err := inspect(wasm)
	if err != nil {
		return Info{}, malformed(err)
	}
	return info, nil
}

// inspect is Inspect with errors as wasmbin returns them.
func inspect(wasm []byte) (Info, error) {
	sum := sha256.Sum256(wasm)
	info := Info{
		SHA256:         hex.EncodeToString(sum[:]),
		Size:           len(wasm),
		Imports:        []Import{},
		Exports:        []Export{},
		Memories:       []Memory{},
		Tables:         []Table{},
		CustomSections: []string{},
	}
	secs, err := wasmbin.ReadSections(wasm)
	if err != nil {
		return Info{}, err
	}
	var (
		types     []string // signatures by type index
		funcTypes []int    // type index of every function, imports first
		code      wasmbin.Code
	)
	sigOf := func(r *wasmbin.Reader, typeIdx uint32) (string, error) {
		if int64(typeIdx) >= int64(len(types)) {
			return "", r.Failf("type index %d out of range (%d types)", typeIdx, len(types))
		}
		return types[typeIdx], nil
	}
	for _, s := range secs {
		r := s.Reader()
		switch s.ID {
		case wasmbin.SecCustom:
			info.CustomSections = append(info.CustomSections, s.Name)
			continue
		case wasmbin.SecType:
			n, err := r.Count("types", wasmbin.NoLimit, 3)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				t, err := r.FuncType(wasmbin.NoLimit)
				if err != nil {
					return Info{}, err
				}
				types = append(types, signature(t))
			}
			err = r.End("type")
			if err != nil {
				return Info{}, err
			}
		case wasmbin.SecImport:
			n, err := r.Count("imports", wasmbin.NoLimit, 4)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				imp, typeIdx, err := readImport(r, sigOf)
				if err != nil {
					return Info{}, err
				}
				switch imp.Kind {
				case "func":
					funcTypes = append(funcTypes, typeIdx)
				case "memory":
					info.Memories = append(info.Memories, imp.memory)
				case "table":
					info.Tables = append(info.Tables, imp.table)
				}
				info.Imports = append(info.Imports, imp.Import)
			}
			if err := r.End("import"); err != nil {
				return Info{}, err
			}
		case wasmbin.SecFunction:
			n, err := r.Count("functions", wasmbin.NoLimit, 1)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				idx, err := r.U32()
				if err != nil {
					return Info{}, err
				}
				if _, err := sigOf(r, idx); err != nil {
					return Info{}, err
				}
				funcTypes = append(funcTypes, int(idx))
			}
			if err := r.End("function"); err != nil {
				return Info{}, err
			}
		case wasmbin.SecTable:
			n, err := r.Count("tables", wasmbin.NoLimit, 3)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				et, err := r.RefType()
				if err != nil {
					return Info{}, err
				}
				l, err := r.TableLimits()
				if err != nil {
					return Info{}, err
				}
				info.Tables = append(info.Tables, Table{Bounds: boundsOf(l), ElemType: wasmbin.ValTypeName(et)})
			}
			if err := r.End("table"); err != nil {
				return Info{}, err
			}
		case wasmbin.SecMemory:
			n, err := r.Count("memories", wasmbin.NoLimit, 2)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				l, err := r.MemoryLimits()
				if err != nil {
					return Info{}, err
				}
				info.Memories = append(info.Memories, Memory{Bounds: boundsOf(l)})
			}
			if err := r.End("memory"); err != nil {
				return Info{}, err
			}
		case wasmbin.SecExport:
			n, err := r.Count("exports", wasmbin.NoLimit, 3)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				name, err := r.Name()
				if err != nil {
					return Info{}, err
				}
				k, err := r.Byte()
				if err != nil {
					return Info{}, err
				}
				idx, err := r.U32()
				if err != nil {
					return Info{}, err
				}
				kind, ok := externKind(k)
				if !ok {
					return Info{}, r.Failf("unknown export kind 0x%02x", k)
				}
				e := Export{Name: name, Kind: kind}
				if k == wasmbin.KindFunc {
					if int64(idx) >= int64(len(funcTypes)) {
						return Info{}, r.Failf("export %q: function index %d out of range", name, idx)
					}
					e.Signature = types[funcTypes[idx]]
				}
				info.Exports = append(info.Exports, e)
			}
			if err := r.End("export"); err != nil {
				return Info{}, err
			}
		case wasmbin.SecCode:
			// Lenient on purpose: code the runtime's reader cannot follow
			// only leaves Grows unset (see Table.Grows).
			if c, err := wasmbin.ScanCode(s); err == nil {
				code = c
			}
		}
	}
	for i := range info.Tables {
		info.Tables[i].Grows = code.GrownTables[uint32(i)]
	}
	body, err := findManifest(secs)
	switch {
	case err != nil:
		info.ManifestError = err
	case body != nil:
		m, err := ParseManifest(body)
		if err != nil {
			info.ManifestError = err
		} else {
			info.Manifest = &m
		}
	}
	return info, nil
}

// signature renders a function type as "(i32, i32) -> i32"; a function
// without results is "(i32, i32)", one with several "(i32) -> (i32, i64)".
func signature(t wasmbin.FuncType) string {
	sig := "(" + wasmbin.ValTypeList(t.Params) + ")"
	switch results := wasmbin.ValTypeList(t.Results); {
	case results == "":
	case strings.Contains(results, ","):
		sig += " -> (" + results + ")"
	default:
		sig += " -> " + results
	}
	return sig
}

// externKind names an import or export kind.
func externKind(k byte) (string, bool) {
	switch k {
	case wasmbin.KindFunc:
		return "func", true
	case wasmbin.KindTable:
		return "table", true
	case wasmbin.KindMemory:
		return "memory", true
	case wasmbin.KindGlobal:
		return "global", true
	case wasmbin.KindTag:
		return "tag", true
	}
	return "", false
}

// importEntry is an import with the table or memory it brings.
type importEntry struct {
	Import
	memory Memory
	table  Table
}

// readImport reads one import; for a function it also returns its type
// index.
func readImport(r *wasmbin.Reader, sigOf func(*wasmbin.Reader, uint32) (string, error)) (importEntry, int, error) {
	var e importEntry
	var err error
	if e.Module, err = r.Name(); err != nil {
		return e, 0, err
	}
	if e.Name, err = r.Name(); err != nil {
		return e, 0, err
	}
	k, err := r.Byte()
	if err != nil {
		return e, 0, err
	}
	kind, ok := externKind(k)
	if !ok {
		return e, 0, r.Failf("import %s.%s: unknown kind 0x%02x", e.Module, e.Name, k)
	}
	e.Kind = kind
	typeIdx := 0
	switch k {
	case wasmbin.KindFunc:
		idx, err := r.U32()
		if err != nil {
			return e, 0, err
		}
		if e.Signature, err = sigOf(r, idx); err != nil {
			return e, 0, err
		}
		typeIdx = int(idx)
	case wasmbin.KindTable:
		et, err := r.RefType()
		if err != nil {
			return e, 0, err
		}
		l, err := r.TableLimits()
		if err != nil {
			return e, 0, err
		}
		e.table = Table{Bounds: boundsOf(l), ElemType: wasmbin.ValTypeName(et), Imported: true}
		e.Signature = e.table.ElemType + " " + e.table.Bounds.String()
	case wasmbin.KindMemory:
		l, err := r.MemoryLimits()
		if err != nil {
			return e, 0, err
		}
		e.memory = Memory{Bounds: boundsOf(l), Imported: true}
		e.Signature = e.memory.Bounds.String()
	case wasmbin.KindGlobal:
		if e.Signature, err = globalType(r); err != nil {
			return e, 0, err
		}
	case wasmbin.KindTag:
		attr, err := r.Byte()
		if err != nil {
			return e, 0, err
		}
		if attr != 0 {
			return e, 0, r.Failf("import %s.%s: bad tag attribute %d", e.Module, e.Name, attr)
		}
		idx, err := r.U32()
		if err != nil {
			return e, 0, err
		}
		if e.Signature, err = sigOf(r, idx); err != nil {
			return e, 0, err
		}
	}
	return e, typeIdx, nil
}

// globalType reads a global's type and renders it as "i32" or "mut i32".
func globalType(r *wasmbin.Reader) (string, error) {
	t, err := r.ValType()
	if err != nil {
		return "", err
	}
	mut, err := r.Byte()
	if err != nil {
		return "", err
	}
	switch mut {
	case 0:
		return wasmbin.ValTypeName(t), nil
	case 1:
		return "mut " + wasmbin.ValTypeName(t), nil
	}
	return "", r.Failf("bad global mutability 0x%02x", mut)
}

// String renders a one-line summary of the info, for logs.
func (i Info) String() string {
	name := "(no manifest)"
	if i.Manifest != nil {
		name = i.Manifest.Name
	}
	return fmt.Sprintf("%s: %d bytes, sha256 %s, %d imports, %d exports", name, i.Size, i.SHA256, len(i.Imports), len(i.Exports))
}
