package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/agcore/agrun/permission"
	"github.com/google/jsonschema-go/jsonschema"
)

// Func is a Tool made from a Go function, as the MCP Go SDK's AddTool
// makes one: its parameters schema is derived from In (a struct: its
// exported fields by their json names, required unless omitempty or
// omitzero, described by a `jsonschema:"..."` tag; unknown properties
// refused), the registry validates the arguments against it and decodes
// them into In, and the result is Out as JSON.
//
//	count, err := registry.NewFunc("word_count", "Count the words of a text",
//		func(ctx context.Context, in struct {
//			Text string `json:"text" jsonschema:"the text to count"`
//		}) (map[string]int, error) {
//			return map[string]int{"words": len(strings.Fields(in.Text))}, nil
//		})
//
// An error fn returns is the call's result as a tool error (kind
// execution_failed, its message shown to the model), unless it is
// already an *Error, whose kind is kept. A panic in fn is recovered by
// the registry (kind execution_failed). A Func is safe for concurrent use
// if fn is.
type Func[In, Out any] struct {
	name, description string
	params            json.RawMessage
	perms             []permission.Permission
	fn                func(context.Context, In) (Out, error)
}

// NewFunc returns the Func calling fn, declaring perms. It fails if name
// is not a valid tool name, or In's schema cannot be derived or is not
// an object schema (In must be a struct, or a map with string keys).
func NewFunc[In, Out any](name, description string, fn func(context.Context, In) (Out, error), perms ...permission.Permission) (*Func[In, Out], error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("tool name %q must match %s", name, NamePattern)
	}
	if fn == nil {
		return nil, fmt.Errorf("tool %q: no function", name)
	}
	s, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, fmt.Errorf("tool %q: the schema of its argument type: %w", name, err)
	}
	params, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", name, err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("tool %q: its argument type must be a struct (or a map): its schema is %s", name, params)
	}
	return &Func[In, Out]{name: name, description: description, params: params, perms: perms, fn: fn}, nil
}

// Name implements Tool.
func (f *Func[In, Out]) Name() string { return f.name }

// Description implements Tool.
func (f *Func[In, Out]) Description() string { return f.description }

// Parameters implements Tool: the schema derived from In.
func (f *Func[In, Out]) Parameters() json.RawMessage { return f.params }

// Permissions implements Tool.
func (f *Func[In, Out]) Permissions() []permission.Permission { return f.perms }

// Execute implements Tool: args (validated by the registry when called
// through Invoke) decoded into In, fn called, Out marshalled.
func (f *Func[In, Out]) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	var in In
	if len(bytes.TrimSpace(args)) > 0 {
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, Errorf(InvalidArguments, f.name, "the arguments do not fit the tool's parameters: %v", err)
		}
	}
	out, err := f.fn(ctx, in)
	if err != nil {
		return nil, NewError(ExecutionFailed, f.name, err) // an *Error keeps its kind
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, Errorf(ExecutionFailed, f.name, "the result is not JSON: %v", err)
	}
	return b, nil
}
