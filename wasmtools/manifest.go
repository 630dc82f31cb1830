package wasmtools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

// Manifest limits.
const (
	// MaxManifestBytes caps a manifest, JSON or TOML.
	MaxManifestBytes = 64 << 10
	// maxVersion caps the free-form version string.
	maxVersion = 64
	// maxDescription caps the description: it is sent to the model with
	// every request, so it should be short anyway.
	maxDescription = 4 << 10
	// maxManifestDepth bounds the nesting of a manifest document.
	maxManifestDepth = registry.MaxDepth
)

// Output formats of a tool's stdout.
const (
	// OutputJSON: stdout is one JSON value, the result (the default).
	OutputJSON = "json"
	// OutputText: stdout is text, returned to the model as a JSON string.
	OutputText = "text"
)

// defaultParameters is the schema of a tool that declares none.
var defaultParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// Manifest describes a WASM tool: what the model sees (name, description,
// parameters), what the tool needs (permissions) and how its output is read.
// It is stored as JSON in the module's agrun.manifest custom section:
//
//	{"name":"get_weather","version":"1.0.0","description":"Current weather for a city",
//	 "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},
//	 "permissions":["network"],"output":"json"}
//
// Manifests from untrusted sources must go through [ParseManifest] (or
// [ParseManifestTOML]), which is strict; [Manifest.Validate] checks a
// Manifest built in Go.
type Manifest struct {
	// Name is the tool's default name: ^[a-zA-Z0-9_-]{1,64}$. Required.
	Name string `json:"name"`
	// Version is free-form (e.g. "1.0.0"), at most 64 bytes of printable
	// text. Optional.
	Version string `json:"version,omitempty"`
	// Description tells the model what the tool does, at most 4 KiB of
	// text without control characters (but newline and tab) or invisible
	// characters (zero-width, bidi controls, tags, private use): the model
	// reads it as is. Required.
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments: an object schema
	// that compiles. Empty means {"type":"object","properties":{}}.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// Permissions the tool declares; each listed once. For WASM tools they
	// are also the capabilities it may be granted.
	Permissions []permission.Permission `json:"permissions,omitempty"`
	// Output is "json" (the default when empty) or "text".
	Output string `json:"output,omitempty"`
	// OutputSchema is the JSON Schema of the tool's result (extending
	// design.md's manifest; optional): an object schema that compiles,
	// bounded as Parameters is, with Output "json". A result that does
	// not match it fails the call (execution_failed); `agrun mcp serve`
	// advertises it as the tool's outputSchema and sends the result as
	// structuredContent. Empty: none.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
}

// ErrInvalidManifest is wrapped by every manifest error: errors.Is(err,
// ErrInvalidManifest) holds for the errors of ParseManifest,
// ParseManifestTOML, ReadManifestFile and Manifest.Validate.
var ErrInvalidManifest = errors.New("invalid manifest")

// ManifestError is a manifest that was refused: Field names the offending
// field ("" for the document as a whole) and Err says why.
type ManifestError struct {
	Field string
	Err   error
}

// Error returns "wasmtools: invalid manifest: <field>: <reason>".
func (e *ManifestError) Error() string {
	if e.Field == "" {
		return ErrInvalidManifest.Error() + ": " + e.Err.Error()
	}
	return ErrInvalidManifest.Error() + ": " + e.Field + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *ManifestError) Unwrap() error { return e.Err }

// Is makes every ManifestError match ErrInvalidManifest.
func (e *ManifestError) Is(target error) bool { return target == ErrInvalidManifest }

func manifestErr(field, format string, args ...any) error {
	return &ManifestError{Field: field, Err: fmt.Errorf(format, args...)}
}

// manifestFields are the keys a manifest may have, exactly so spelled.
var manifestFields = []string{"name", "version", "description", "parameters", "permissions", "output", "output_schema"}

// ParseManifest decodes a manifest from JSON, strictly: the document must be
// one JSON object of at most MaxManifestBytes; unknown fields (matched
// case-sensitively), duplicate keys at any depth, null values, a name
// outside ^[a-zA-Z0-9_-]{1,64}$, an empty description or one with control
// or invisible characters (see Manifest.Description), an unknown or
// repeated permission, an output other than "json" or "text", and a
// parameters schema that is not an object schema or does not compile are
// errors (*ManifestError, wrapping ErrInvalidManifest). The result is
// normalized: Output is "json" when absent and Parameters is
// {"type":"object","properties":{}} when absent; Parameters is compacted.
func ParseManifest(data []byte) (Manifest, error) {
	if len(data) > MaxManifestBytes {
		return Manifest{}, manifestErr("", "%d bytes, at most %d", len(data), MaxManifestBytes)
	}
	if !utf8.Valid(data) {
		return Manifest{}, manifestErr("", "not valid UTF-8")
	}
	if err := checkJSON(data); err != nil {
		return Manifest{}, &ManifestError{Err: err}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return Manifest{}, manifestErr("", "not a JSON object")
	}
	if fields == nil {
		return Manifest{}, manifestErr("", "not a JSON object")
	}
	for k := range fields {
		if !slices.Contains(manifestFields, k) {
			return Manifest{}, manifestErr("", "unknown field %q (known: %s)", textsafe.Truncate(k, 64), strings.Join(manifestFields, ", "))
		}
	}
	var m Manifest
	for _, k := range manifestFields {
		raw, ok := fields[k]
		if !ok {
			continue
		}
		if string(raw) == "null" {
			return Manifest{}, manifestErr(k, "null is not allowed (leave the field out)")
		}
		var err error
		switch k {
		case "name":
			err = json.Unmarshal(raw, &m.Name)
		case "version":
			err = json.Unmarshal(raw, &m.Version)
		case "description":
			err = json.Unmarshal(raw, &m.Description)
		case "output":
			err = json.Unmarshal(raw, &m.Output)
		case "parameters":
			m.Parameters = raw
		case "output_schema":
			m.OutputSchema = raw
		case "permissions":
			var ss []string
			if err = json.Unmarshal(raw, &ss); err == nil {
				m.Permissions, err = parsePermissions(ss)
			}
		}
		if err != nil {
			return Manifest{}, &ManifestError{Field: k, Err: jsonTypeError(err)}
		}
	}
	m = m.normalized()
	if err := m.Validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// jsonTypeError words encoding/json's type errors without Go type names.
func jsonTypeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := "a " + te.Type.Kind().String()
		if te.Type.Kind().String() == "slice" {
			want = "an array of strings"
		}
		return fmt.Errorf("got a JSON %s, want %s", te.Value, want)
	}
	return err
}

// parsePermissions parses permission names; an element that is not a
// string is caught by the JSON decoder before.
func parsePermissions(ss []string) ([]permission.Permission, error) {
	ps := make([]permission.Permission, 0, len(ss))
	for _, s := range ss {
		p, err := permission.Parse(s)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// normalized fills the defaults: Output "json", the empty object schema,
// and compacts Parameters.
func (m Manifest) normalized() Manifest {
	if m.Output == "" {
		m.Output = OutputJSON
	}
	if len(bytes.TrimSpace(m.Parameters)) == 0 {
		m.Parameters = slices.Clone(defaultParameters)
	} else {
		var buf bytes.Buffer
		if json.Compact(&buf, m.Parameters) == nil {
			m.Parameters = buf.Bytes()
		}
	}
	if len(m.OutputSchema) > 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, m.OutputSchema) == nil {
			m.OutputSchema = buf.Bytes()
		}
	}
	if m.Permissions == nil {
		m.Permissions = []permission.Permission{}
	}
	return m
}

// Validate checks a manifest as ParseManifest does, except for what only a
// document can get wrong (unknown fields, duplicate keys at the top level,
// null values). Empty Output and Parameters mean their defaults. Errors are
// *ManifestError.
func (m Manifest) Validate() error {
	if m.Name == "" {
		return manifestErr("name", "missing (it must match %s)", registry.NamePattern)
	}
	if !registry.ValidName(m.Name) {
		return manifestErr("name", "%q does not match %s", textsafe.Truncate(m.Name, 80), registry.NamePattern)
	}
	if len(m.Version) > maxVersion {
		return manifestErr("version", "%d bytes, at most %d", len(m.Version), maxVersion)
	}
	if !textsafe.IsSafe(m.Version) || strings.ContainsAny(m.Version, "\n\t") {
		return manifestErr("version", "must be printable UTF-8 text")
	}
	if strings.TrimSpace(m.Description) == "" {
		return manifestErr("description", "missing: the model chooses tools by their description")
	}
	if len(m.Description) > maxDescription {
		return manifestErr("description", "%d bytes, at most %d", len(m.Description), maxDescription)
	}
	if !utf8.ValidString(m.Description) {
		return manifestErr("description", "not valid UTF-8")
	}
	if i := textsafe.IndexUnsafe(m.Description); i >= 0 {
		r, _ := utf8.DecodeRuneInString(m.Description[i:])
		return manifestErr("description", "%U at byte %d: control characters (but newline and tab) and invisible characters (zero-width, bidi controls, tags, variation selectors, fillers, private use, noncharacters: see internal/textsafe) are not allowed: the model reads the description as is", r, i)
	}
	for i, p := range m.Permissions {
		if p.IsZero() {
			return manifestErr("permissions", "entry %d is the zero Permission", i)
		}
		if slices.Contains(m.Permissions[:i], p) {
			return manifestErr("permissions", "%q is listed twice", p)
		}
	}
	switch m.Output {
	case "", OutputJSON, OutputText:
	default:
		return manifestErr("output", "%q, want %q or %q", textsafe.Truncate(m.Output, 32), OutputJSON, OutputText)
	}
	if _, err := registry.CompileSchema(m.Parameters); err != nil {
		return &ManifestError{Field: "parameters", Err: err}
	}
	if len(bytes.TrimSpace(m.OutputSchema)) > 0 {
		if m.Output == OutputText {
			return manifestErr("output_schema", `a tool with output = "text" returns a string, which no object schema matches: use output = "json"`)
		}
		if _, err := registry.CompileSchema(m.OutputSchema); err != nil {
			return &ManifestError{Field: "output_schema", Err: err}
		}
	}
	if n := len(m.Parameters) + len(m.OutputSchema) + len(m.Description) + len(m.Version) + len(m.Name); n > MaxManifestBytes {
		return manifestErr("", "%d bytes, at most %d", n, MaxManifestBytes)
	}
	return nil
}

// MarshalJSON encodes the manifest compactly, with its fields in the
// documented order and without HTML escaping; Parameters is written as
// given (it must be valid JSON).
func (m Manifest) MarshalJSON() ([]byte, error) {
	type plain Manifest // no MarshalJSON method: no recursion
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(plain(m)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// checkJSON checks that data is exactly one JSON value without duplicate
// object keys at any depth and nested at most maxManifestDepth deep. Errors
// name the JSON pointer of the offending object.
func checkJSON(data []byte) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	type frame struct {
		seg     string          // this container's key or index in its parent
		keys    map[string]bool // objects: the keys seen
		key     string          // objects: the key whose value comes next
		wantKey bool            // objects: a key comes next
		n       int             // arrays: values seen
	}
	var stack []*frame
	pointer := func() string {
		var b strings.Builder
		for _, f := range stack[1:] {
			b.WriteByte('/')
			b.WriteString(strings.ReplaceAll(strings.ReplaceAll(f.seg, "~", "~0"), "/", "~1"))
		}
		if b.Len() == 0 {
			return "/"
		}
		return textsafe.Truncate(b.String(), 200)
	}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			if len(stack) != 0 {
				return errors.New("not JSON: unexpected end of input")
			}
			return errors.New("empty document")
		}
		if err != nil {
			return fmt.Errorf("not JSON: %v", err)
		}
		seg := "" // the segment of a value starting here
		if n := len(stack); n > 0 {
			top := stack[n-1]
			switch {
			case top.keys == nil: // array
				if tok != json.Delim(']') {
					seg = fmt.Sprint(top.n)
					top.n++
				}
			case top.wantKey:
				if k, ok := tok.(string); ok {
					if top.keys[k] {
						return fmt.Errorf("%s: duplicate key %q", pointer(), textsafe.Truncate(k, 64))
					}
					top.keys[k] = true
					top.key, top.wantKey = k, false
					continue
				}
			default: // the value of top.key
				seg = top.key
				top.wantKey = true
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxManifestDepth {
				return fmt.Errorf("nesting deeper than %d", maxManifestDepth)
			}
			f := &frame{seg: seg}
			if tok == json.Delim('{') {
				f.keys, f.wantKey = map[string]bool{}, true
			}
			stack = append(stack, f)
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			if _, err := d.Token(); err != io.EOF {
				return errors.New("not JSON: unexpected data after the value")
			}
			return nil
		}
	}
}

// ParseManifestTOML decodes a manifest written in TOML, with the same keys
// and rules as ParseManifest (unknown keys are errors; TOML itself refuses
// duplicate keys). The parameters schema may be written either as a TOML
// table:
//
//	[parameters]
//	type = "object"
//	required = ["city"]
//	[parameters.properties.city]
//	type = "string"
//
// or as a string holding the JSON schema:
//
//	parameters = '''{"type":"object","properties":{"city":{"type":"string"}}}'''
//
// TOML dates and times are refused anywhere in the manifest, and so is
// nesting deeper than 32 levels (tables, arrays, inline tables, each
// segment of a dotted key or table header counting as one): the TOML
// decoder's time grows faster than quadratically with depth, so depth is
// checked on the bytes before decoding. A deeper schema can be written in
// the JSON string form, where the JSON rules apply.
func ParseManifestTOML(data []byte) (Manifest, error) {
	if len(data) > MaxManifestBytes {
		return Manifest{}, manifestErr("", "%d bytes, at most %d", len(data), MaxManifestBytes)
	}
	if err := checkTOMLDepth(data); err != nil {
		return Manifest{}, &ManifestError{Err: err}
	}
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		return Manifest{}, &ManifestError{Err: fmt.Errorf("not TOML: %w", err)}
	}
	for k := range doc {
		if !slices.Contains(manifestFields, k) {
			return Manifest{}, manifestErr("", "unknown key %q (known: %s)", textsafe.Truncate(k, 64), strings.Join(manifestFields, ", "))
		}
	}
	for _, k := range []string{"parameters", "output_schema"} {
		if s, ok := doc[k].(string); ok {
			if !json.Valid([]byte(s)) {
				return Manifest{}, manifestErr(k, "the string is not valid JSON")
			}
			doc[k] = json.RawMessage(s)
		}
	}
	for k, v := range doc {
		if err := checkTOMLValue(v, 0); err != nil {
			return Manifest{}, &ManifestError{Field: k, Err: err}
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return Manifest{}, &ManifestError{Err: err}
	}
	return ParseManifest(b)
}

// maxTOMLDepth bounds the nesting of a TOML manifest (see
// ParseManifestTOML). A hand-written manifest rarely goes past 8.
const maxTOMLDepth = 32

// checkTOMLDepth refuses a TOML document nested deeper than maxTOMLDepth,
// in one pass over its bytes and without decoding it: the depth of a value
// is the number of table header segments above it (plus one for an array
// of tables), plus the segments of its (dotted) key, plus one for each
// enclosing array; an inline table's keys count from the inline table's
// own depth. Strings and comments are skipped. The count never falls short
// of the decoded document's depth, and errs on the generous side only for
// empty arrays and inline tables. The scan is lenient with malformed
// input, which the decoder refuses afterwards.
func checkTOMLDepth(data []byte) error {
	if depth, line := tomlDepth(data, maxTOMLDepth); depth > maxTOMLDepth {
		return fmt.Errorf("line %d: nested deeper than %d levels (tables, arrays, inline tables and the segments of dotted keys count)", line, maxTOMLDepth)
	}
	return nil
}

// tomlDepth returns the depth of data as checkTOMLDepth counts it, or, as
// soon as it exceeds limit, that depth and the line where it did.
func tomlDepth(data []byte, limit int) (depth, line int) {
	type container struct {
		depth int  // the container's own depth
		table bool // an inline table (else an array)
	}
	var stack []container
	base := 0     // depth of the current [table] or [[array of tables]]
	atKey := true // a key (or at the top level a table header) comes next
	vd := 0       // the depth of a value starting here
	i, n := 0, len(data)
	// deeper records d and reports whether the scan is over the limit (the
	// stack counts too: inline tables in key position nest without depth).
	deeper := func(d int) bool {
		depth = max(depth, d, len(stack))
		if depth > limit {
			line = 1 + bytes.Count(data[:min(i, n)], []byte{'\n'})
			return true
		}
		return false
	}
	cur := func() int { // the depth keys of the current table count from
		if len(stack) == 0 {
			return base
		}
		return stack[len(stack)-1].depth
	}
	for i < n {
		c := data[i]
		switch {
		case c == '#':
			for i < n && data[i] != '\n' {
				i++
			}
			continue
		case c == '\n':
			i++
			if len(stack) == 0 {
				atKey = true
			}
			continue
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		}
		if atKey {
			if len(stack) == 0 && c == '[' {
				i++
				array := i < n && data[i] == '['
				if array {
					i++
				}
				var k int
				k, i = scanTOMLKey(data, i)
				base = k
				if array {
					base++
				}
				if deeper(base) {
					return depth, line
				}
				for i < n && data[i] != '\n' && data[i] != '#' {
					i++ // the closing brackets (and junk the decoder refuses)
				}
				continue
			}
			var k int
			k, i = scanTOMLKey(data, i)
			if i < n && data[i] == '=' {
				i++
			}
			vd = cur() + k
			if deeper(vd) {
				return depth, line
			}
			atKey = false
			continue
		}
		switch c {
		case '"', '\'':
			i = skipTOMLString(data, i)
			continue
		case '[', '{':
			stack = append(stack, container{depth: vd, table: c == '{'})
			if c == '{' {
				atKey = true
			} else {
				vd++
			}
			if deeper(vd) {
				return depth, line
			}
		case ']', '}':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if len(stack) > 0 {
				top := stack[len(stack)-1]
				if top.table {
					atKey = true
				} else {
					vd = top.depth + 1
				}
			}
		}
		i++
	}
	return depth, 0
}

// scanTOMLKey reads a (dotted) key starting at i and returns its number of
// segments and the index of the first byte after it (an '=', a ']', or
// whatever ended it).
func scanTOMLKey(data []byte, i int) (segments, next int) {
	n := len(data)
	for i < n {
		switch c := data[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '.':
			i++
		case c == '"' || c == '\'':
			segments++
			i = skipTOMLString(data, i)
		case c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			segments++
			for i < n && (data[i] == '_' || data[i] == '-' || data[i] >= '0' && data[i] <= '9' || data[i] >= 'a' && data[i] <= 'z' || data[i] >= 'A' && data[i] <= 'Z' || data[i] >= 0x80) {
				i++
			}
		default:
			return segments, i
		}
	}
	return segments, i
}

// skipTOMLString returns the index after the string starting at i (a
// quote): basic or literal, one-line or multi-line. An unterminated
// string ends at the end of its line (one-line) or of the data.
func skipTOMLString(data []byte, i int) int {
	n := len(data)
	q := data[i]
	if i+2 < n && data[i+1] == q && data[i+2] == q { // multi-line
		j := i + 3
		for j < n {
			if q == '"' && data[j] == '\\' {
				j += 2
				continue
			}
			if j+2 < n && data[j] == q && data[j+1] == q && data[j+2] == q {
				j += 3
				for k := 0; k < 2 && j < n && data[j] == q; k++ {
					j++ // up to two quotes may end the content
				}
				return j
			}
			j++
		}
		return n
	}
	j := i + 1
	for j < n && data[j] != '\n' {
		switch {
		case q == '"' && data[j] == '\\':
			j += 2
			continue
		case data[j] == q:
			return j + 1
		}
		j++
	}
	return j
}

// checkTOMLValue refuses values that have no JSON equivalent: dates and
// times, and non-finite floats.
func checkTOMLValue(v any, depth int) error {
	if depth > maxManifestDepth {
		return fmt.Errorf("nesting deeper than %d", maxManifestDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if err := checkTOMLValue(e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkTOMLValue(e, depth+1); err != nil {
				return err
			}
		}
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return errors.New("inf and nan have no JSON form")
		}
	case string, int64, bool, json.RawMessage:
	default:
		return fmt.Errorf("a TOML %T has no JSON form", v)
	}
	return nil
}

// ReadManifestFile reads a manifest file: TOML if its name ends in
// ".toml", JSON if it ends in ".json"; any other extension is an error.
func ReadManifestFile(path string) (Manifest, error) {
	var parse func([]byte) (Manifest, error)
	switch strings.ToLower(filepath.Ext(path)) {
	case ".toml":
		parse = ParseManifestTOML
	case ".json":
		parse = ParseManifest
	default:
		return Manifest{}, fmt.Errorf("%w: %s: the file name must end in .toml or .json", ErrInvalidManifest, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return Manifest{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return Manifest{}, err
	}
	m, err := parse(data)
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
