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
	m, err := wasmbin.ParseLenient(wasm)
	if err != nil {
		return Info{}, malformed(err)
	}
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
	info.describeImports(m)
	info.describeDefinitions(m)
	info.describeExports(m)
	for _, c := range m.Customs {
		info.CustomSections = append(info.CustomSections, c.Name)
	}
	info.Manifest, info.ManifestError = manifestOf(m.Sections)
	return info, nil
}

// describeImports lists the imports, and the tables and memories they
// bring.
func (i *Info) describeImports(m *wasmbin.Module) {
	for _, im := range m.Imports {
		e := Import{Module: im.Module, Name: im.Name, Kind: externKind(im.Kind)}
		switch im.Kind {
		case wasmbin.KindFunc, wasmbin.KindTag:
			e.Signature = signature(im.Type)
		case wasmbin.KindTable:
			t := tableOf(m, len(i.Tables), im.ElemType, im.Limits)
			t.Imported = true
			i.Tables = append(i.Tables, t)
			e.Signature = t.ElemType + " " + t.Bounds.String()
		case wasmbin.KindMemory:
			mem := Memory{Bounds: boundsOf(im.Limits), Imported: true}
			i.Memories = append(i.Memories, mem)
			e.Signature = mem.Bounds.String()
		case wasmbin.KindGlobal:
			e.Signature = wasmbin.ValTypeName(im.Global.Type)
			if im.Global.Mutable {
				e.Signature = "mut " + e.Signature
			}
		}
		i.Imports = append(i.Imports, e)
	}
}

// describeDefinitions lists the tables and memories the module defines,
// after the imported ones.
func (i *Info) describeDefinitions(m *wasmbin.Module) {
	for _, t := range m.Tables {
		i.Tables = append(i.Tables, tableOf(m, len(i.Tables), t.ElemType, t.Limits))
	}
	for _, l := range m.Memories {
		i.Memories = append(i.Memories, Memory{Bounds: boundsOf(l)})
	}
}

// describeExports lists the exports, with the signature of each exported
// function.
func (i *Info) describeExports(m *wasmbin.Module) {
	var funcs []wasmbin.FuncType // the function index space
	for _, im := range m.Imports {
		if im.Kind == wasmbin.KindFunc {
			funcs = append(funcs, im.Type)
		}
	}
	for _, ti := range m.FuncTypes {
		funcs = append(funcs, m.Types[ti])
	}
	for _, ex := range m.Exports {
		e := Export{Name: ex.Name, Kind: externKind(ex.Kind)}
		if ex.Kind == wasmbin.KindFunc {
			// The parser checked the index against the functions
			// declared before the export section.
			e.Signature = signature(funcs[ex.Index])
		}
		i.Exports = append(i.Exports, e)
	}
}

// tableOf describes table idx of the index space.
func tableOf(m *wasmbin.Module, idx int, elem byte, l wasmbin.Limits) Table {
	return Table{Bounds: boundsOf(l), ElemType: wasmbin.ValTypeName(elem), Grows: m.GrownTables[uint32(idx)]}
}

// boundsOf converts limits as wasmbin reads them.
func boundsOf(l wasmbin.Limits) Bounds {
	out := Bounds{Min: l.Min, Shared: l.Shared}
	if l.HasMax {
		out.Max = &l.Max
	}
	return out
}

// manifestOf decodes the module's manifest section: nil and nil if there
// is none, else the manifest or why it was refused.
func manifestOf(secs []wasmbin.Section) (*Manifest, error) {
	body, err := findManifest(secs)
	if err != nil || body == nil {
		return nil, err
	}
	m, err := ParseManifest(body)
	if err != nil {
		return nil, err
	}
	return &m, nil
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

// externKind names an import or export kind as Import.Kind and
// Export.Kind do.
func externKind(k byte) string {
	switch k {
	case wasmbin.KindFunc:
		return "func"
	case wasmbin.KindTable:
		return "table"
	case wasmbin.KindMemory:
		return "memory"
	case wasmbin.KindGlobal:
		return "global"
	}
	return "tag" // the parser accepts no other kind
}

// String renders a one-line summary of the info, for logs.
func (i Info) String() string {
	name := "(no manifest)"
	if i.Manifest != nil {
		name = i.Manifest.Name
	}
	return fmt.Sprintf("%s: %d bytes, sha256 %s, %d imports, %d exports", name, i.Size, i.SHA256, len(i.Imports), len(i.Exports))
}
