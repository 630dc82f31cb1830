package mcp

import (
	"reflect"
	"testing"
)

// TestElicitFieldString: a field is described on one line with its type
// (any when unset), whether it is required, its title and description,
// its default and its allowed values.
func TestElicitFieldString(t *testing.T) {
	for _, c := range []struct {
		f    ElicitField
		want string
	}{
		{ElicitField{Name: "n"}, "n (any)"},
		{ElicitField{Name: "age", Type: "integer", Required: true, Title: "Age", Description: "in years", Default: 3}, "age (integer, required): Age in years [default: 3]"},
		{ElicitField{Name: "c", Type: "string", Enum: []string{"red", "blue"}}, "c (string) one of red|blue"},
		{ElicitField{Name: "d", Type: "string", Description: "only a description"}, "d (string): only a description"},
	} {
		if got := c.f.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.f, got, c.want)
		}
	}
}

// TestElicitFieldParse: an answer becomes a value of the field's type,
// or an error saying what was wanted.
func TestElicitFieldParse(t *testing.T) {
	for _, c := range []struct {
		f       ElicitField
		line    string
		want    any
		wantErr string
	}{
		{ElicitField{Type: "integer"}, "42", int64(42), ""},
		{ElicitField{Type: "integer"}, "4.2", nil, "want a whole number"},
		{ElicitField{Type: "number"}, "4.5", 4.5, ""},
		{ElicitField{Type: "number"}, "x", nil, "want a number"},
		{ElicitField{Type: "boolean"}, "Yes", true, ""},
		{ElicitField{Type: "boolean"}, "false", false, ""},
		{ElicitField{Type: "boolean"}, "maybe", nil, "want yes or no"},
		{ElicitField{Type: "string"}, "hi", "hi", ""},
		{ElicitField{Type: "string"}, "", nil, "an answer is required"},
		{ElicitField{}, "", nil, "an answer is required"},
		{ElicitField{Type: "string", Enum: []string{"a", "b"}}, "c", nil, "want one of a, b"},
		{ElicitField{Type: "string", Enum: []string{"a", "b"}}, "b", "b", ""},
	} {
		got, err := c.f.Parse(c.line)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%+v %q: %v, %v; want error %q", c.f, c.line, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v %q: %#v, %v; want %#v", c.f, c.line, got, err, c.want)
		}
	}
}
