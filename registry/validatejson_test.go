package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// ValidateJSON decodes as strictly as arguments (duplicate keys, trailing
// data, depth) and validates with the same metering and context.
func TestValidateJSON(t *testing.T) {
	s, err := CompileSchema([]byte(`{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.ValidateJSON(ctx, []byte(`{"n":2}`)); err != nil {
		t.Errorf("valid: %v", err)
	}
	for _, bad := range []string{`{"n":0}`, `{}`, `{"n":1,"n":2}`, `{"n":1} x`, strings.Repeat("[", 200) + strings.Repeat("]", 200), `nope`} {
		if err := s.ValidateJSON(ctx, []byte(bad)); err == nil {
			t.Errorf("%.40s: accepted", bad)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.ValidateJSON(done, []byte(`{"n":2}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
