package wasmtools

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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

// Limits are the bounds of a memory (in 64 KiB pages) or a table (in
// elements). Max is nil when the module declares no maximum.
type Limits struct {
	Min    uint32  `json:"min"`
	Max    *uint32 `json:"max"`
	Shared bool    `json:"shared,omitempty"`
}

// Memory is a linear memory of a module.
type Memory struct {
	Limits
	Imported bool `json:"imported,omitempty"`
}

// Table is a table of a module.
type Table struct {
	Limits
	// ElemType is "funcref" or "externref".
	ElemType string `json:"elem_type"`
	Imported bool   `json:"imported,omitempty"`
}

// Inspect describes a module without compiling it: its manifest, hash,
// size, imports, exports, memories and tables. It reads only the module's
// outer structure, in time and memory bounded by the module's size, so it
// is safe on untrusted bytes; it does not validate function bodies (Load
// does). A malformed module is an error wrapping ErrMalformed; a malformed
// manifest is not an error of Inspect but is reported in
// Info.ManifestError.
func Inspect(wasm []byte) (Info, error) {
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
	secs, err := readSections(wasm)
	if err != nil {
		return Info{}, err
	}
	var (
		types     []string // signatures by type index
		funcTypes []int    // type index of every function, imports first
	)
	sigOf := func(r *binReader, typeIdx uint32) (string, error) {
		if int64(typeIdx) >= int64(len(types)) {
			return "", r.errorf("type index %d out of range (%d types)", typeIdx, len(types))
		}
		return types[typeIdx], nil
	}
	for _, s := range secs {
		r := &binReader{b: s.payload, at: s.end - len(s.payload)}
		switch s.id {
		case secCustom:
			info.CustomSections = append(info.CustomSections, s.name)
			continue
		case secType:
			n, err := r.count("types", 3)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				sig, err := r.funcSig()
				if err != nil {
					return Info{}, err
				}
				types = append(types, sig)
			}
			err = r.end("type")
			if err != nil {
				return Info{}, err
			}
		case secImport:
			n, err := r.count("imports", 4)
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
			if err := r.end("import"); err != nil {
				return Info{}, err
			}
		case secFunction:
			n, err := r.count("functions", 1)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				idx, err := r.u32()
				if err != nil {
					return Info{}, err
				}
				if _, err := sigOf(r, idx); err != nil {
					return Info{}, err
				}
				funcTypes = append(funcTypes, int(idx))
			}
			if err := r.end("function"); err != nil {
				return Info{}, err
			}
		case secTable:
			n, err := r.count("tables", 3)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				et, err := r.refType()
				if err != nil {
					return Info{}, err
				}
				l, err := r.limits("table")
				if err != nil {
					return Info{}, err
				}
				info.Tables = append(info.Tables, Table{Limits: l, ElemType: et})
			}
			if err := r.end("table"); err != nil {
				return Info{}, err
			}
		case secMemory:
			n, err := r.count("memories", 2)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				l, err := r.limits("memory")
				if err != nil {
					return Info{}, err
				}
				info.Memories = append(info.Memories, Memory{Limits: l})
			}
			if err := r.end("memory"); err != nil {
				return Info{}, err
			}
		case secExport:
			n, err := r.count("exports", 3)
			if err != nil {
				return Info{}, err
			}
			for i := 0; i < n; i++ {
				name, err := r.name()
				if err != nil {
					return Info{}, err
				}
				k, err := r.byte()
				if err != nil {
					return Info{}, err
				}
				idx, err := r.u32()
				if err != nil {
					return Info{}, err
				}
				kind, ok := externKind(k)
				if !ok {
					return Info{}, r.errorf("unknown export kind 0x%02x", k)
				}
				e := Export{Name: name, Kind: kind}
				if k == 0 {
					if int64(idx) >= int64(len(funcTypes)) {
						return Info{}, r.errorf("export %q: function index %d out of range", name, idx)
					}
					e.Signature = types[funcTypes[idx]]
				}
				info.Exports = append(info.Exports, e)
			}
			if err := r.end("export"); err != nil {
				return Info{}, err
			}
		}
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

// externKind names an import or export kind.
func externKind(k byte) (string, bool) {
	switch k {
	case 0:
		return "func", true
	case 1:
		return "table", true
	case 2:
		return "memory", true
	case 3:
		return "global", true
	case 4:
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
func readImport(r *binReader, sigOf func(*binReader, uint32) (string, error)) (importEntry, int, error) {
	var e importEntry
	var err error
	if e.Module, err = r.name(); err != nil {
		return e, 0, err
	}
	if e.Name, err = r.name(); err != nil {
		return e, 0, err
	}
	k, err := r.byte()
	if err != nil {
		return e, 0, err
	}
	kind, ok := externKind(k)
	if !ok {
		return e, 0, r.errorf("import %s.%s: unknown kind 0x%02x", e.Module, e.Name, k)
	}
	e.Kind = kind
	typeIdx := 0
	switch k {
	case 0:
		idx, err := r.u32()
		if err != nil {
			return e, 0, err
		}
		if e.Signature, err = sigOf(r, idx); err != nil {
			return e, 0, err
		}
		typeIdx = int(idx)
	case 1:
		et, err := r.refType()
		if err != nil {
			return e, 0, err
		}
		l, err := r.limits("table")
		if err != nil {
			return e, 0, err
		}
		e.table = Table{Limits: l, ElemType: et, Imported: true}
		e.Signature = et + " " + l.String()
	case 2:
		l, err := r.limits("memory")
		if err != nil {
			return e, 0, err
		}
		e.memory = Memory{Limits: l, Imported: true}
		e.Signature = l.String()
	case 3:
		if e.Signature, err = r.globalType(); err != nil {
			return e, 0, err
		}
	case 4:
		attr, err := r.byte()
		if err != nil {
			return e, 0, err
		}
		if attr != 0 {
			return e, 0, r.errorf("import %s.%s: bad tag attribute %d", e.Module, e.Name, attr)
		}
		idx, err := r.u32()
		if err != nil {
			return e, 0, err
		}
		if e.Signature, err = sigOf(r, idx); err != nil {
			return e, 0, err
		}
	}
	return e, typeIdx, nil
}

// String renders a one-line summary of the info, for logs.
func (i Info) String() string {
	name := "(no manifest)"
	if i.Manifest != nil {
		name = i.Manifest.Name
	}
	return fmt.Sprintf("%s: %d bytes, sha256 %s, %d imports, %d exports", name, i.Size, i.SHA256, len(i.Imports), len(i.Exports))
}
