package wasmtools

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/agcore/agrun/permission"
	"github.com/agcore/agrun/registry"
)

func TestParseManifest(t *testing.T) {
	m, err := ParseManifest([]byte(`{"name":"get_weather","version":"1.0.0","description":"Current weather for a city",
 "parameters":{"type":"object", "properties":{"city":{"type":"string"}},"required":["city"]},
 "permissions":["network", "custom:geo.lookup"],"output":"json"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{
		Name: "get_weather", Version: "1.0.0", Description: "Current weather for a city",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
		Permissions: []permission.Permission{permission.Network, permission.MustParse("custom:geo.lookup")},
		Output:      "json",
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got  %+v\nwant %+v", m, want)
	}
}

func TestParseManifestDefaults(t *testing.T) {
	m, err := ParseManifest([]byte(`{"name":"x","description":"does x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Output != "json" || string(m.Parameters) != `{"type":"object","properties":{}}` || m.Permissions == nil || len(m.Permissions) != 0 || m.Version != "" {
		t.Fatalf("defaults: %+v", m)
	}
	if _, err := registry.CompileSchema(m.Parameters); err != nil {
		t.Fatal(err)
	}
}

func TestParseManifestErrors(t *testing.T) {
	big := `{"name":"x","description":"` + strings.Repeat("a", MaxManifestBytes) + `"}`
	deep := `{"name":"x","description":"d","parameters":{"type":"object","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`
	tests := []struct {
		name, doc, field, want string
	}{
		{"empty", ``, "", "empty document"},
		{"not json", `name = "x"`, "", "not JSON"},
		{"array", `["name"]`, "", "not a JSON object"},
		{"string", `"name"`, "", "not a JSON object"},
		{"null document", `null`, "", "not a JSON object"},
		{"trailing data", `{"name":"x","description":"d"} {}`, "", "after the value"},
		{"over 64 KiB", big, "", "at most 65536"},
		{"invalid utf-8", "{\"name\":\"x\",\"description\":\"\xff\"}", "", "UTF-8"},
		{"unknown field", `{"name":"x","description":"d","entrypoint":"main"}`, "", `unknown field "entrypoint"`},
		{"case variant of a field", `{"Name":"x","description":"d"}`, "", `unknown field "Name"`},
		{"duplicate top-level key", `{"name":"x","name":"y","description":"d"}`, "", `/: duplicate key "name"`},
		{"duplicate key deep in parameters", `{"name":"x","description":"d","parameters":{"type":"object","properties":{"a":{"type":"string","type":"number"}}}}`, "", `/parameters/properties/a: duplicate key "type"`},
		{"duplicate key in an array", `{"name":"x","description":"d","parameters":{"type":"object","allOf":[{},{"a/b":{"x":1,"x":2}}]}}`, "", `/parameters/allOf/1/a~1b: duplicate key "x"`},
		{"nesting too deep", deep, "", "nesting deeper than"},
		{"missing name", `{"description":"d"}`, "name", "missing"},
		{"empty name", `{"name":"","description":"d"}`, "name", "missing"},
		{"name with space", `{"name":"get weather","description":"d"}`, "name", "does not match"},
		{"name with dot", `{"name":"a.b","description":"d"}`, "name", "does not match"},
		{"name too long", `{"name":"` + strings.Repeat("a", 65) + `","description":"d"}`, "name", "does not match"},
		{"name not a string", `{"name":7,"description":"d"}`, "name", "got a JSON number, want a string"},
		{"null name", `{"name":null,"description":"d"}`, "name", "null is not allowed"},
		{"missing description", `{"name":"x"}`, "description", "missing"},
		{"blank description", `{"name":"x","description":"  "}`, "description", "missing"},
		{"version too long", `{"name":"x","description":"d","version":"` + strings.Repeat("1", 65) + `"}`, "version", "at most 64"},
		{"version control char", `{"name":"x","description":"d","version":"1\u001b[31m"}`, "version", "printable"},
		{"version with a C1 control", `{"name":"x","description":"d","version":"1\u009b"}`, "version", "printable"},
		{"version with a bidi override", `{"name":"x","description":"d","version":"1\u202e"}`, "version", "printable"},
		{"description with ESC", `{"name":"x","description":"hi\u001b[2J"}`, "description", "U+001B at byte 2"},
		{"description with CR", `{"name":"x","description":"a\r\nb"}`, "description", "U+000D"},
		{"description with NUL", `{"name":"x","description":"a\u0000"}`, "description", "U+0000"},
		{"description with DEL", `{"name":"x","description":"a\u007f"}`, "description", "U+007F"},
		{"description with a C1 CSI", `{"name":"x","description":"a\u009b31m"}`, "description", "U+009B"},
		{"description with a bidi override", `{"name":"x","description":"a\u202eb"}`, "description", "U+202E"},
		{"description with a bidi isolate", `{"name":"x","description":"a\u2067b"}`, "description", "U+2067"},
		{"description with a zero-width space", `{"name":"x","description":"a\u200bb"}`, "description", "U+200B"},
		{"description with a zero-width joiner", `{"name":"x","description":"a\u200db"}`, "description", "U+200D"},
		{"description with a BOM", `{"name":"x","description":"\ufeffa"}`, "description", "U+FEFF"},
		{"description with a tag character", `{"name":"x","description":"a\udb40\udc49"}`, "description", "U+E0049"},
		{"description with a private-use character", `{"name":"x","description":"a\ue000"}`, "description", "U+E000"},
		{"description with a line separator", `{"name":"x","description":"a\u2028b"}`, "description", "U+2028"},
		{"unknown permission", `{"name":"x","description":"d","permissions":["network","root"]}`, "permissions", `invalid permission "root"`},
		{"empty custom permission", `{"name":"x","description":"d","permissions":["custom:"]}`, "permissions", "needs a name"},
		{"permission not a string", `{"name":"x","description":"d","permissions":[1]}`, "permissions", "want a string"},
		{"permissions not an array", `{"name":"x","description":"d","permissions":"network"}`, "permissions", "got a JSON string, want an array of strings"},
		{"duplicate permission", `{"name":"x","description":"d","permissions":["read","read"]}`, "permissions", `"read" is listed twice`},
		{"null permissions", `{"name":"x","description":"d","permissions":null}`, "permissions", "null"},
		{"bad output", `{"name":"x","description":"d","output":"yaml"}`, "output", `"yaml", want "json" or "text"`},
		{"output not a string", `{"name":"x","description":"d","output":true}`, "output", "got a JSON bool"},
		{"parameters not an object", `{"name":"x","description":"d","parameters":[]}`, "parameters", "not a JSON object"},
		{"parameters not an object schema", `{"name":"x","description":"d","parameters":{"type":"string"}}`, "parameters", `"type" must be "object"`},
		{"parameters without type", `{"name":"x","description":"d","parameters":{"properties":{}}}`, "parameters", `"type" must be "object"`},
		{"parameters do not compile", `{"name":"x","description":"d","parameters":{"type":"object","properties":{"a":{"type":"nope"}}}}`, "parameters", "invalid parameters schema"},
		{"parameters with external ref", `{"name":"x","description":"d","parameters":{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}}`, "parameters", "refused"},
		{"parameters absurd number", `{"name":"x","description":"d","parameters":{"type":"object","properties":{"a":{"minimum":1e10000000}}}}`, "parameters", "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tc.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			var me *ManifestError
			if !errors.As(err, &me) || !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("err %v (%T) is not a *ManifestError wrapping ErrInvalidManifest", err, err)
			}
			if me.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q (field %q), want field %q and a message containing %q", err, me.Field, tc.field, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "invalid manifest: ") {
				t.Fatalf("message %q lacks the package prefix", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Manifest{Name: "x", Description: "d"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal manifest: %v", err)
	}
	// Newlines, tabs and visible non-ASCII text are fine in a description.
	fine := Manifest{Name: "x", Description: "Météo ☀ 天気 😀\n\tline two — «ok»"}
	if err := fine.Validate(); err != nil {
		t.Fatalf("description with newline, tab and visible Unicode: %v", err)
	}
	tests := []struct {
		name string
		m    Manifest
		want string
	}{
		{"zero permission", Manifest{Name: "x", Description: "d", Permissions: []permission.Permission{{}}}, "zero Permission"},
		{"raw parameters not JSON", Manifest{Name: "x", Description: "d", Parameters: json.RawMessage(`{`)}, "not JSON"},
		{"bad output", Manifest{Name: "x", Description: "d", Output: "JSON"}, `"JSON"`},
		{"description with an OSC sequence", Manifest{Name: "x", Description: "d\x1b]0;pwned\x07"}, "description: U+001B at byte 1"},
		{"description with invisible text", Manifest{Name: "x", Description: "d\u200b\u202e"}, "description: U+200B at byte 1"},
		// The same set as everywhere (internal/textsafe): mcp drops these
		// from server descriptions, so a manifest may not carry them.
		{"description with a variation selector", Manifest{Name: "x", Description: "d\ufe0f"}, "description: U+FE0F at byte 1"},
		{"description with a Hangul filler", Manifest{Name: "x", Description: "d\u3164"}, "description: U+3164 at byte 1"},
		{"description with a noncharacter", Manifest{Name: "x", Description: "d\ufdd0"}, "description: U+FDD0 at byte 1"},
		{"version with a tab", Manifest{Name: "x", Description: "d", Version: "1\t2"}, "version: must be printable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestParseManifestTOML(t *testing.T) {
	table := `
name = "get_weather"
version = "1.0.0"
description = "Current weather for a city"
permissions = ["network"]

[parameters]
type = "object"
required = ["city"]
[parameters.properties.city]
type = "string"
maxLength = 100
`
	asString := `
name = "get_weather"
version = "1.0.0"
description = "Current weather for a city"
permissions = ["network"]
parameters = '''
{"type":"object","required":["city"],"properties":{"city":{"type":"string","maxLength":100}}}
'''
`
	a, err := ParseManifestTOML([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseManifestTOML([]byte(asString))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "get_weather" || a.Output != "json" || len(a.Permissions) != 1 || a.Permissions[0] != permission.Network {
		t.Fatalf("got %+v", a)
	}
	// Both spellings give the same schema.
	var sa, sb any
	json.Unmarshal(a.Parameters, &sa)
	json.Unmarshal(b.Parameters, &sb)
	if !reflect.DeepEqual(sa, sb) {
		t.Fatalf("table form %s != string form %s", a.Parameters, b.Parameters)
	}
}

func TestParseManifestTOMLErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown key", "name = \"x\"\ndescription = \"d\"\nentry = \"main\"\n", `unknown key "entry"`},
		{"duplicate key", "name = \"x\"\nname = \"y\"\ndescription = \"d\"\n", "not TOML"},
		{"not toml", "{\"name\":\"x\"}", "not TOML"},
		{"bad name", "name = \"a b\"\ndescription = \"d\"\n", "does not match"},
		{"name is a number", "name = 5\ndescription = \"d\"\n", "want a string"},
		{"unknown permission", "name = \"x\"\ndescription = \"d\"\npermissions = [\"sudo\"]\n", "invalid permission"},
		{"date value", "name = \"x\"\ndescription = \"d\"\n[parameters]\ntype = \"object\"\ndefault = 1979-05-27\n", "no JSON form"},
		{"nan value", "name = \"x\"\ndescription = \"d\"\n[parameters]\ntype = \"object\"\nminimum = nan\n", "no JSON form"},
		{"parameters string not json", "name = \"x\"\ndescription = \"d\"\nparameters = \"{\"\n", "not valid JSON"},
		{"parameters string not object schema", "name = \"x\"\ndescription = \"d\"\nparameters = '{\"type\":\"array\"}'\n", `"type" must be "object"`},
		{"output wrong", "name = \"x\"\ndescription = \"d\"\noutput = \"xml\"\n", `"xml"`},
		{"over 64 KiB", "name = \"x\"\ndescription = \"" + strings.Repeat("a", MaxManifestBytes) + "\"\n", "at most 65536"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifestTOML([]byte(tc.doc))
			if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidManifest mentioning %q", err, tc.want)
			}
		})
	}
}

func TestReadManifestFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	j, err := ReadManifestFile(write("m.json", `{"name":"a","description":"d","output":"text"}`))
	if err != nil || j.Name != "a" || j.Output != "text" {
		t.Fatalf("json: %+v %v", j, err)
	}
	tm, err := ReadManifestFile(write("m.TOML", "name = \"b\"\ndescription = \"d\"\n"))
	if err != nil || tm.Name != "b" {
		t.Fatalf("toml: %+v %v", tm, err)
	}
	if _, err := ReadManifestFile(write("m.yaml", "name: c")); !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), ".toml or .json") {
		t.Fatalf("yaml: %v", err)
	}
	p := write("bad.json", `{"name":"a b","description":"d"}`)
	if _, err := ReadManifestFile(p); !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), p) {
		t.Fatalf("bad: %v does not name the file", err)
	}
	if _, err := ReadManifestFile(filepath.Join(dir, "missing.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

// TestExampleManifests parses every example tool's manifest source.
func TestExampleManifests(t *testing.T) {
	dirs, _ := filepath.Glob("../testdata/*/manifest.*")
	if len(dirs) < 5 {
		t.Fatalf("found %d example manifests, want at least 5", len(dirs))
	}
	for _, p := range dirs {
		m, err := ReadManifestFile(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if want := filepath.Base(filepath.Dir(p)); m.Name != want {
			t.Errorf("%s: name %q, want %q", p, m.Name, want)
		}
	}
}

func TestManifestMarshalJSON(t *testing.T) {
	m := Manifest{Name: "x", Description: "a <b> & c", Permissions: []permission.Permission{permission.Read}, Output: "text",
		Parameters: json.RawMessage(`{"type":"object"}`)}
	b, err := m.MarshalJSON() // json.Marshal would escape <, > and & again
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"x","description":"a <b> & c","parameters":{"type":"object"},"permissions":["read"],"output":"text"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	back, err := ParseManifest(b)
	if err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

// The depth checkTOMLDepth counts: table header segments, dotted key
// segments, arrays and inline tables, with strings and comments skipped.
func TestTOMLDepth(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want int
	}{
		{"a = 1", 1},
		{"a.b.c = 1", 3},
		{"a . 'b' . \"c\" = 1", 3},
		{`"a.b.c" = 1`, 1},
		{"[a.b]\nc = 1", 3},
		{"[ \"x.y\" . z ]\nw = 1", 3},
		{"[[a.b]]\nc = 1", 4},
		{"[a.b.c.d]\n[e]\nf = 1", 4},
		{"a = [1, [2, [3]]]", 4},
		{"a = [[1], 2, 3]", 3},
		{"a = {b.c = {d = 1}, e = 2}", 4},
		{"a = [{b = 1}, {c = [2]}]", 4},
		{"a = [\n  1, # [[[[\n  [2],\n]", 3},
		{"a = \"[[[{{{\\\"[[[\" # [[[[ {{{{\nb = 1", 1},
		{"a = '[[[{{{'\nb = '''\n[[[[\n{{{{\n'''\nc = \"\"\"\n\\\"\"\"[[[[\n\"\"\"\"\"\nd = 1", 1},
		{"# [[[[[[\n[a] # [[[[\nb = 1", 2},
	} {
		if got, _ := tomlDepth([]byte(tc.doc), 1<<20); got != tc.want {
			t.Errorf("tomlDepth(%q) = %d, want %d", tc.doc, got, tc.want)
		}
		var v map[string]any
		if _, err := toml.Decode(tc.doc, &v); err != nil {
			t.Errorf("%q is not valid TOML: %v", tc.doc, err)
		} else if d := decodedDepth(v, 0); d > tc.want {
			t.Errorf("%q decodes %d deep, more than its count %d", tc.doc, d, tc.want)
		}
	}
}

// decodedDepth is the depth of a decoded TOML value at level: the entries
// of the top-level table are at level 1.
func decodedDepth(v any, level int) int {
	d := level
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			d = max(d, decodedDepth(e, level+1))
		}
	case []map[string]any:
		for _, e := range x {
			d = max(d, decodedDepth(e, level+1))
		}
	case []any:
		for _, e := range x {
			d = max(d, decodedDepth(e, level+1))
		}
	}
	return d
}

// ParseManifestTOML refuses nesting beyond maxTOMLDepth before decoding:
// the TOML decoder needs minutes for 16000 nested inline tables, which fit
// in 64 KiB. The boundary is exact: 32 levels pass, 33 do not.
func TestParseManifestTOMLNesting(t *testing.T) {
	n := (MaxManifestBytes - 100) / 4
	nested := func(open, close string, k int) string {
		return strings.Repeat(open, k) + "1" + strings.Repeat(close, k)
	}
	// parameters.properties.a.properties.a... k times: a header 1+2k deep.
	schema := func(k int, last string) string {
		return "name = \"x\"\ndescription = \"d\"\n[parameters]\ntype = \"object\"\n[parameters" + strings.Repeat(".properties.a", k) + "]\n" + last + "\n"
	}
	for _, tc := range []struct {
		name, doc, line string
	}{
		{"inline tables filling 64 KiB", "name = \"x\"\ndescription = \"d\"\nx = " + nested("{a=", "}", n) + "\n", "line 3:"},
		{"arrays", "name = \"x\"\ndescription = \"d\"\nx = " + nested("[", "]", 32) + "\n", "line 3:"},
		{"dotted key", "name = \"x\"\ndescription = \"d\"\n" + strings.Repeat("a.", 32) + "a = 1\n", "line 3:"},
		{"table header", "name = \"x\"\ndescription = \"d\"\n[" + strings.Repeat("a.", 32) + "a]\n", "line 3:"},
		{"array of tables", "name = \"x\"\ndescription = \"d\"\n[[" + strings.Repeat("a.", 31) + "a]]\n", "line 3:"},
		{"schema 33 deep", schema(15, `enum = ["a"]`), "line 6:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifestTOML([]byte(tc.doc))
			var me *ManifestError
			if !errors.As(err, &me) || !strings.Contains(err.Error(), "nested deeper than 32 levels") || !strings.Contains(err.Error(), tc.line) {
				t.Fatalf("err = %v; want a *ManifestError saying %s nested deeper than 32 levels", err, tc.line)
			}
		})
	}
	m, err := ParseManifestTOML([]byte(schema(15, `type = "string"`)))
	if err != nil {
		t.Fatalf("a schema 32 deep: %v", err)
	}
	if !strings.Contains(string(m.Parameters), strings.Repeat(`{"properties":{"a":`, 14)) {
		t.Errorf("parameters = %s", m.Parameters)
	}
}
