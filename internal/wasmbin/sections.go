package wasmbin

import "fmt"

// Header is the magic number and version 1 of the binary format, the first
// eight bytes of every module.
const Header = "\x00asm\x01\x00\x00\x00"

// Section ids.
const (
	SecCustom    = 0
	SecType      = 1
	SecImport    = 2
	SecFunction  = 3
	SecTable     = 4
	SecMemory    = 5
	SecGlobal    = 6
	SecExport    = 7
	SecStart     = 8
	SecElement   = 9
	SecCode      = 10
	SecData      = 11
	SecDataCount = 12
	SecTag       = 13 // exception-handling proposal; Parse refuses it
)

// Section is one section of a module as it appears in the binary.
type Section struct {
	ID         byte
	Start, End int    // the whole section in the module, id byte included
	Payload    []byte // the section's contents, after the id and size
	Name       string // custom sections only: the name
	Body       []byte // custom sections only: the payload after the name
}

// Reader returns a Reader on the section's payload that reports offsets in
// the module.
func (s Section) Reader() *Reader { return NewReader(s.Payload, s.End-len(s.Payload)) }

// ReadSections splits a module into its sections. It checks the header,
// that every section lies within the module, that section ids are known
// (up to SecTag), that custom sections have a valid name, and that no
// other section appears twice; it does not look inside other sections nor
// check their order (Parse does). The sections tile the module after the
// header and alias b.
func ReadSections(b []byte) ([]Section, error) {
	if len(b) < len(Header) || string(b[:4]) != Header[:4] {
		return nil, &Error{Reason: "not a WebAssembly module (bad magic number)"}
	}
	if string(b[4:8]) != Header[4:] {
		return nil, &Error{Offset: 4, Reason: "unsupported binary version (only version 1 is supported)"}
	}
	r := &Reader{b: b, off: len(Header)}
	var secs []Section
	var seen [SecTag + 1]bool
	for !r.EOF() {
		start := r.off
		id, err := r.Byte()
		if err != nil {
			return nil, err
		}
		if id > SecTag {
			return nil, r.Failf("unknown section id %d", id)
		}
		if id != SecCustom {
			if seen[id] {
				return nil, r.Failf("section %d appears twice", id)
			}
			seen[id] = true
		}
		size, err := r.U32()
		if err != nil {
			return nil, err
		}
		payload, err := r.Bytes(int(size))
		if err != nil {
			return nil, annotate(err, fmt.Sprintf("section %d declares %d bytes", id, size))
		}
		s := Section{ID: id, Start: start, End: r.off, Payload: payload}
		if id == SecCustom {
			pr := s.Reader()
			if s.Name, err = pr.Name(); err != nil {
				return nil, annotate(err, "custom section name")
			}
			s.Body = payload[pr.off:]
		}
		secs = append(secs, s)
	}
	return secs, nil
}

// AppendCustomSection appends a custom section with the given name and
// body to b.
func AppendCustomSection(b []byte, name string, body []byte) []byte {
	payload := AppendU32(nil, uint32(len(name)))
	payload = append(payload, name...)
	b = append(b, SecCustom)
	b = AppendU32(b, uint32(len(payload)+len(body)))
	b = append(b, payload...)
	return append(b, body...)
}

// StripSections returns a copy of module b without its sections with the
// given id; secs are b's sections (from ReadSections or Module.Sections).
func StripSections(b []byte, secs []Section, id byte) []byte {
	out := make([]byte, 0, len(b))
	prev := 0
	for _, s := range secs {
		if s.ID == id {
			out = append(out, b[prev:s.Start]...)
			prev = s.End
		}
	}
	return append(out, b[prev:]...)
}

// AddExports returns a copy of module b whose export section also lists
// extra, after the module's own exports; secs are b's sections. It fails
// if an extra name is already exported (export names must be unique).
// Indexes are not checked: the compiler validates them.
func AddExports(b []byte, m *Module, extra []Export) ([]byte, error) {
	names := make(map[string]bool, len(m.Exports)+len(extra))
	for _, e := range m.Exports {
		names[e.Name] = true
	}
	var entries []byte
	for _, e := range extra {
		if names[e.Name] {
			return nil, fmt.Errorf("export %q already exists", e.Name)
		}
		names[e.Name] = true
		entries = AppendU32(entries, uint32(len(e.Name)))
		entries = append(entries, e.Name...)
		entries = append(entries, e.Kind)
		entries = AppendU32(entries, e.Index)
	}
	// The old entries follow the old count in the old section's payload.
	var old []byte
	at := -1 // where the new section goes: the old one's place, or in order
	end := -1
	for _, s := range m.Sections {
		if s.ID == SecExport {
			r := s.Reader()
			if _, err := r.U32(); err != nil {
				return nil, err
			}
			old = s.Payload[r.off:]
			at, end = s.Start, s.End
			break
		}
		if s.ID != SecCustom && sectionOrder[s.ID] > sectionOrder[SecExport] && at < 0 {
			at, end = s.Start, s.Start
		}
	}
	if at < 0 {
		at, end = len(b), len(b)
	}
	payload := AppendU32(nil, uint32(len(m.Exports)+len(extra)))
	payload = append(append(payload, old...), entries...)
	out := make([]byte, 0, len(b)+len(entries)+16)
	out = append(out, b[:at]...)
	out = append(out, SecExport)
	out = AppendU32(out, uint32(len(payload)))
	out = append(out, payload...)
	return append(out, b[end:]...), nil
}
