package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// MaxSchemaBytes caps a tool's parameters schema.
const MaxSchemaBytes = 64 << 10

// ErrInvalidSchema is wrapped by every schema error from CompileSchema and
// Register.
var ErrInvalidSchema = errors.New("invalid parameters schema")

// Schema is a compiled parameters schema. It is immutable and safe for
// concurrent use.
type Schema struct {
	raw json.RawMessage
	sch *jsonschema.Schema
}

// noLoader refuses every external reference: a schema may refer only to
// itself. The validator's default loader would read local files.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external reference %q refused: a schema may refer only to itself", truncate(url, 100))
}

// schemaURL is the base URL of every compiled schema; relative references
// resolve against it and reach noLoader.
const schemaURL = "mem:///agrun/parameters.json"

// CompileSchema checks and compiles a parameters schema: at most
// MaxSchemaBytes, strict JSON (no duplicate keys, bounded nesting), an object
// with "type": "object", and no reference outside itself. Errors wrap
// ErrInvalidSchema. An empty schema means {"type":"object"}.
func CompileSchema(raw json.RawMessage) (s *Schema, err error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidSchema, len(raw), MaxSchemaBytes)
	}
	doc, err := decodeStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: not a JSON object", ErrInvalidSchema)
	}
	if t, _ := obj["type"].(string); t != "object" {
		return nil, fmt.Errorf(`%w: "type" must be "object"`, ErrInvalidSchema)
	}
	defer func() { // the compiler must never take the process down
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: compiler panic: %v", ErrInvalidSchema, r)
		}
	}()
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	return &Schema{raw: append(json.RawMessage(nil), raw...), sch: sch}, nil
}

// Raw returns the schema's JSON text as given.
func (s *Schema) Raw() json.RawMessage { return s.raw }

// Validate checks a decoded instance. Errors are plain messages naming JSON
// pointers, e.g. "/city: missing".
func (s *Schema) Validate(v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("arguments could not be validated: %v", r)
		}
	}()
	verr := s.sch.Validate(v)
	if verr == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return verr
	}
	var msgs []string
	collect(ve, &msgs)
	if len(msgs) == 0 {
		return errors.New("arguments do not match the schema")
	}
	const maxMsgs = 10
	if len(msgs) > maxMsgs {
		msgs = append(msgs[:maxMsgs], fmt.Sprintf("and %d more", len(msgs)-maxMsgs))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// collect appends one message per leaf of the validation error tree.
func collect(ve *jsonschema.ValidationError, msgs *[]string) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collect(c, msgs)
		}
		return
	}
	if req, ok := ve.ErrorKind.(*kind.Required); ok {
		for _, m := range req.Missing {
			*msgs = append(*msgs, pointer(append(append([]string(nil), ve.InstanceLocation...), m))+": missing")
		}
		return
	}
	unit := ve.BasicOutput()
	text := string(ve.ErrorKind.KeywordPath()[0])
	if unit.Error != nil {
		text = unit.Error.String()
	} else {
		for _, u := range unit.Errors {
			if u.Error != nil {
				text = u.Error.String()
				break
			}
		}
	}
	*msgs = append(*msgs, pointer(ve.InstanceLocation)+": "+text)
}
