package mcp

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// String describes the field for a person, on one line: "name (string,
// required): title description [default: x] one of a|b". Its parts are
// the server's text (cleaned by the client): a terminal escapes it.
func (f ElicitField) String() string {
	var b strings.Builder
	typ := f.Type
	if typ == "" {
		typ = "any"
	}
	b.WriteString(f.Name + " (" + typ)
	if f.Required {
		b.WriteString(", required")
	}
	b.WriteString(")")
	if t := strings.TrimSpace(f.Title + " " + f.Description); t != "" {
		b.WriteString(": " + t)
	}
	if f.Default != nil {
		fmt.Fprintf(&b, " [default: %v]", f.Default)
	}
	if len(f.Enum) > 0 {
		b.WriteString(" one of " + strings.Join(f.Enum, "|"))
	}
	return b.String()
}

// Parse is a person's answer as a value of the field's type: one of
// Enum; an int64 for "integer", a float64 for "number", a bool for
// "boolean" (y, yes, true; n, no, false); else the text, which must not
// be empty. The error says what was wanted ("want a number").
func (f ElicitField) Parse(line string) (any, error) {
	if len(f.Enum) > 0 && !slices.Contains(f.Enum, line) {
		return nil, fmt.Errorf("want one of %s", strings.Join(f.Enum, ", "))
	}
	switch f.Type {
	case "integer":
		n, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, errors.New("want a whole number")
		}
		return n, nil
	case "number":
		x, err := strconv.ParseFloat(line, 64)
		if err != nil {
			return nil, errors.New("want a number")
		}
		return x, nil
	case "boolean":
		switch strings.ToLower(line) {
		case "y", "yes", "true":
			return true, nil
		case "n", "no", "false":
			return false, nil
		}
		return nil, errors.New("want yes or no")
	}
	if line == "" {
		return nil, errors.New("an answer is required")
	}
	return line, nil
}
