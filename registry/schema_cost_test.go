package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agcore/agrun/permission"
)

// ChainSchema is the schema of the issue: properties.x refers to $defs d0,
// and each di is a kw (anyOf, allOf, oneOf) of two $refs to d(i+1); the
// last is {"type":"string"}. Validating one value visits about 3·2^n
// subschemas. It is exported for the registry_test package.
func ChainSchema(kw string, n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"x":{"$ref":"#/$defs/d0"}},"$defs":{`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `"d%d":{"%s":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, kw, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, n)
	return b.String()
}

// LevelBomb is a schema that passes registration (a handful of visits per
// value) but doubles its visits at every level of the arguments: both
// alternatives descend into the same key "a". NestedA(depth) is its bomb.
const LevelBomb = `{"type":"object","anyOf":[{"properties":{"a":{"$ref":"#"}}},{"properties":{"a":{"$ref":"#"}}}],"required":["zz"]}`

// NestedA is {"a":{"a":...{}}} nested depth deep.
func NestedA(depth int) json.RawMessage {
	return json.RawMessage(strings.Repeat(`{"a":`, depth) + `{}` + strings.Repeat(`}`, depth))
}

// Metered validates v against s like ValidateContext and also returns the
// meter's count of visits and steps. It is exported for registry_test.
func Metered(ctx context.Context, s *Schema, v any) (visits, steps int64, err error) {
	c, err := s.get()
	if err != nil {
		return 0, 0, err
	}
	defer s.put(c)
	verr, err := c.validate(ctx, v)
	if err == nil {
		err = verr
	}
	return c.m.visits, c.m.steps, err
}

// MaxOvershoot bounds how far past MaxValidationSteps one validation may
// get before the meter stops it: the visit (or match) that crosses the
// line is charged after it is counted, and a visit's own work is bounded by
// the argument cap times its weights.
const MaxOvershoot = 1 << 20

func TestSchemaCostRefusesExponentialChains(t *testing.T) {
	for _, c := range []struct {
		kw string
		n  int
	}{{"anyOf", 26}, {"allOf", 40}, {"oneOf", 20}, {"anyOf", 12}} {
		t.Run(fmt.Sprintf("%s %d", c.kw, c.n), func(t *testing.T) {
			raw := ChainSchema(c.kw, c.n)
			_, err := CompileSchema(json.RawMessage(raw))
			if !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("CompileSchema of %d bytes = %v, want ErrInvalidSchema", len(raw), err)
			}
			if want := fmt.Sprintf("more than %d subschemas", MaxSchemaCost); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name the cost (%q)", err, want)
			}
			// Register reports it the same way, and adds nothing.
			r := New()
			err = r.Register(&costTool{name: "bomb", schema: raw})
			if !errors.Is(err, ErrInvalidSchema) || r.Len() != 0 {
				t.Errorf("Register = %v (%d tools), want ErrInvalidSchema", err, r.Len())
			}
		})
	}
}

func TestSchemaCostUnderTheCap(t *testing.T) {
	// 11 levels: cost(di) = 3 + 2·cost(d(i+1)), cost(d11) = 1, plus x.
	s, err := CompileSchema(json.RawMessage(ChainSchema("anyOf", 11)))
	if err != nil {
		t.Fatal(err)
	}
	want := 1
	for i := 0; i < 11; i++ {
		want = 3 + 2*want
	}
	want++ // properties.x, a $ref to d0
	if s.Cost() != want {
		t.Errorf("Cost = %d, want %d", s.Cost(), want)
	}
	if s.Cost() > MaxSchemaCost {
		t.Fatalf("Cost %d over the cap", s.Cost())
	}
	// A failing value visits every subschema once per path: the count the
	// registration computed is what validation does.
	visits, steps, err := Metered(context.Background(), s, map[string]any{"x": json.Number("1")})
	if err == nil || errors.Is(err, ErrValidationBudget) {
		t.Fatalf("validation = %v, want a mismatch", err)
	}
	if visits > int64(1+s.Cost()) {
		t.Errorf("%d visits, more than the computed bound %d", visits, 1+s.Cost())
	}
	if steps > MaxValidationSteps {
		t.Errorf("%d steps", steps)
	}
	// A passing value too.
	if _, _, err := Metered(context.Background(), s, map[string]any{"x": "ok"}); err != nil {
		t.Errorf("valid value: %v", err)
	}
}

func TestSchemaCycles(t *testing.T) {
	for _, c := range []struct {
		name, schema string
		ok           bool
	}{
		{"root refers to itself", `{"type":"object","$ref":"#"}`, false},
		{"two defs in a ring", `{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"},{}]},"b":{"allOf":[{"$ref":"#/$defs/a"}]}}}`, false},
		{"through not and if", `{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"not":{"if":{"$ref":"#/$defs/a"}}}}}`, false},
		{"a tree: recursion through items", `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}}}`, true},
		{"a filter expression", `{"type":"object","properties":{"f":{"$ref":"#/$defs/f"}},"$defs":{"f":{"anyOf":[{"type":"object","properties":{"and":{"type":"array","items":{"$ref":"#/$defs/f"}}},"required":["and"]},{"type":"object","properties":{"or":{"type":"array","items":{"$ref":"#/$defs/f"}}},"required":["or"]},{"type":"object","properties":{"eq":{"type":"string"}},"required":["eq"]}]}}}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := CompileSchema(json.RawMessage(c.schema))
			if c.ok && err != nil {
				t.Errorf("CompileSchema = %v, want success", err)
			}
			if !c.ok && (!errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), "cycle")) {
				t.Errorf("CompileSchema = %v, want ErrInvalidSchema naming the cycle", err)
			}
		})
	}
}

// TestValidationBudget: a schema cheap per value whose work doubles with
// each level of the arguments is stopped by the run-time budget; the tool
// never runs and the answer says why.
func TestValidationBudget(t *testing.T) {
	r := New()
	tool := &costTool{name: "levels", schema: LevelBomb}
	if err := r.Register(tool); err != nil {
		t.Fatalf("Register: %v", err)
	}
	inv := r.Invoke(context.Background(), "levels", NestedA(60))
	if KindOf(inv.Err) != InvalidArguments || !errors.Is(inv.Err, ErrValidationBudget) {
		t.Fatalf("Invoke = %v, want invalid_arguments wrapping ErrValidationBudget", inv.Err)
	}
	if !strings.Contains(inv.Err.Error(), fmt.Sprint(MaxValidationSteps)) {
		t.Errorf("error %q does not name the budget", inv.Err)
	}
	if tool.calls.Load() != 0 {
		t.Error("the tool ran")
	}
	s, _ := CompileSchema(json.RawMessage(LevelBomb))
	v, _ := decodeStrict(NestedA(60))
	visits, steps, err := Metered(context.Background(), s, v)
	if !errors.Is(err, ErrValidationBudget) || visits > MaxValidationVisits+1+MaxDepth/8 || steps > MaxValidationSteps+MaxOvershoot {
		t.Errorf("%d visits, %d steps, %v", visits, steps, err)
	}
	// A shallow one validates (and fails on "zz", which no level has).
	if inv := r.Invoke(context.Background(), "levels", NestedA(3)); KindOf(inv.Err) != InvalidArguments || errors.Is(inv.Err, ErrValidationBudget) {
		t.Errorf("shallow: %v, want a plain mismatch", inv.Err)
	}
}

// TestPatternCharged: a short pattern whose program is large, matched
// against a long string, is refused before the match runs (it takes over
// a minute unmetered); an ordinary pattern on the same string passes.
func TestPatternCharged(t *testing.T) {
	long := strings.Repeat("a", 1<<20-64)
	args, _ := json.Marshal(map[string]string{"s": long})
	r := New()
	for name, p := range map[string]string{"slow": "[a-z]{1000}[a-z]{1000}[a-z]{1000}b", "fine": "^[a-z]+$"} {
		schema, _ := json.Marshal(map[string]any{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string", "pattern": p}}})
		if err := r.Register(&costTool{name: name, schema: string(schema)}); err != nil {
			t.Fatal(err)
		}
	}
	if inv := r.Invoke(context.Background(), "slow", args); !errors.Is(inv.Err, ErrValidationBudget) {
		t.Errorf("slow pattern: %v, want ErrValidationBudget", inv.Err)
	}
	if inv := r.Invoke(context.Background(), "fine", args); inv.Err != nil {
		t.Errorf("fine pattern: %v", inv.Err)
	}
	// patternProperties are matched against every key: charged the same.
	schema := `{"type":"object","patternProperties":{"[a-z]{1000}[a-z]{1000}[a-z]{1000}b":{}}}`
	if err := r.Register(&costTool{name: "keys", schema: schema}); err != nil {
		t.Fatal(err)
	}
	keyArgs, _ := json.Marshal(map[string]int{long: 1})
	if inv := r.Invoke(context.Background(), "keys", keyArgs); !errors.Is(inv.Err, ErrValidationBudget) {
		t.Errorf("slow pattern on a key: %v, want ErrValidationBudget", inv.Err)
	}
}

// errAfter is a context whose Err is nil for its first n calls and then
// err: a deadline that falls in the middle of a validation, without a
// clock.
type errAfter struct {
	context.Context
	n   atomic.Int64
	err error
}

func (c *errAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return c.err
	}
	return nil
}

// TestValidationHonoursContext: a validation in progress ends with the
// call's context, as a Timeout or Cancelled error, and the tool never runs.
func TestValidationHonoursContext(t *testing.T) {
	r := New()
	tool := &costTool{name: "levels", schema: LevelBomb}
	if err := r.Register(tool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err  error
		want Kind
	}{{context.DeadlineExceeded, Timeout}, {context.Canceled, Cancelled}} {
		ctx := &errAfter{Context: context.Background(), err: c.err}
		ctx.n.Store(3) // Invoke's own look, then two in validation
		inv := r.Invoke(ctx, "levels", NestedA(60))
		if KindOf(inv.Err) != c.want || !errors.Is(inv.Err, c.err) {
			t.Errorf("Invoke = %v, want %s", inv.Err, c.want)
		}
		if ctx.n.Load() >= 0 {
			t.Errorf("validation did not look at the context")
		}
	}
	if tool.calls.Load() != 0 {
		t.Error("the tool ran")
	}
}

// TestOrdinarySchemasUnaffected: the budgets leave real schemas and real
// arguments alone, big ones included.
func TestOrdinarySchemasUnaffected(t *testing.T) {
	enum := make([]string, 300)
	for i := range enum {
		enum[i] = fmt.Sprintf("country-%03d", i)
	}
	items := make([]map[string]any, 5000)
	for i := range items {
		items[i] = map[string]any{"name": fmt.Sprint("n", i), "country": enum[i%300], "n": i}
	}
	schema, _ := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"items": map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/item"}, "uniqueItems": true},
		},
		"$defs": map[string]any{"item": map[string]any{
			"type":     "object",
			"required": []string{"name", "country"},
			"properties": map[string]any{
				"name":    map[string]any{"type": "string", "minLength": 1, "pattern": "^[a-z0-9]+$"},
				"country": map[string]any{"enum": enum},
				"n":       map[string]any{"type": "integer", "minimum": 0},
			},
			"additionalProperties": false,
		}},
	})
	s, err := CompileSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]any{"items": items})
	v, err := decodeStrict(args)
	if err != nil {
		t.Fatal(err)
	}
	if visits, steps, err := Metered(context.Background(), s, v); err != nil {
		t.Errorf("%d KiB of ordinary arguments: %v (%d visits, %d steps)", len(args)>>10, err, visits, steps)
	}
}

// TestSchemaCostProperty generates nested $ref/anyOf/allOf/oneOf/not/
// if-then-else schemas (with properties and items between them, so that
// some recur through the arguments): each is refused by CompileSchema, or
// validating values against it stays within the bounds — for a value with
// no parts, at most the computed cost in visits; for any value, within the
// run-time budget.
func TestSchemaCostProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	refused, accepted := 0, 0
	for i := 0; i < 400; i++ {
		raw := GenSchema(rng)
		if CheckSchemaBounds(t, raw, rng) {
			accepted++
		} else {
			refused++
		}
	}
	if refused == 0 || accepted == 0 {
		t.Errorf("the generator is one-sided: %d refused, %d accepted", refused, accepted)
	}
}

// GenSchema generates a schema of up to 24 $defs whose nodes are anyOf,
// allOf, oneOf, not, if/then/else, $ref, properties and items over each
// other and over leaves that fail without ending their visit early
// (minimum, minLength, required) or pass.
func GenSchema(rng *rand.Rand) string {
	n := 1 + rng.IntN(24)
	ref := func(i int) string {
		// Mostly forward (a DAG), sometimes anywhere (cycles).
		j := i + 1 + rng.IntN(3)
		if rng.IntN(8) == 0 {
			j = rng.IntN(n)
		}
		if j >= n {
			return leaf(rng)
		}
		return fmt.Sprintf(`{"$ref":"#/$defs/d%d"}`, j)
	}
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"a":{"$ref":"#/$defs/d0"}},"$defs":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"d%d":`, i)
		switch k := rng.IntN(9); k {
		case 0, 1, 2:
			kw := []string{"anyOf", "allOf", "oneOf"}[k]
			m := 1 + rng.IntN(3)
			parts := make([]string, m)
			for j := range parts {
				parts[j] = ref(i)
			}
			fmt.Fprintf(&b, `{"%s":[%s]}`, kw, strings.Join(parts, ","))
		case 3:
			fmt.Fprintf(&b, `{"not":%s}`, ref(i))
		case 4:
			fmt.Fprintf(&b, `{"if":%s,"then":%s,"else":%s}`, ref(i), ref(i), ref(i))
		case 5:
			fmt.Fprintf(&b, `{"properties":{"a":%s,"b":%s}}`, ref(i), ref(i))
		case 6:
			fmt.Fprintf(&b, `{"items":%s}`, ref(i))
		case 7:
			fmt.Fprintf(&b, `{"$ref":"#/$defs/d%d","minimum":%d}`, min(i+1, n-1), rng.IntN(3))
		default:
			b.WriteString(leaf(rng))
		}
	}
	b.WriteString(`}}`)
	return b.String()
}

func leaf(rng *rand.Rand) string {
	return []string{`{"minimum":2}`, `{"minLength":2}`, `{"required":["q"]}`, `{}`, `true`, `{"maximum":0}`}[rng.IntN(6)]
}

// genValue is a random argument value of depth at most d.
func genValue(rng *rand.Rand, d int) any {
	switch k := rng.IntN(6); {
	case d == 0 || k == 0:
		return json.Number(fmt.Sprint(rng.IntN(4)))
	case k == 1:
		return "s"
	case k <= 3:
		m := map[string]any{}
		for _, key := range []string{"a", "b", "q"}[:1+rng.IntN(3)] {
			m[key] = genValue(rng, d-1)
		}
		return m
	default:
		arr := make([]any, rng.IntN(4))
		for i := range arr {
			arr[i] = genValue(rng, d-1)
		}
		return arr
	}
}

// CheckSchemaBounds compiles raw; if it is accepted it validates values
// against it and checks the bounds, and reports true. A refusal must wrap
// ErrInvalidSchema.
func CheckSchemaBounds(t testing.TB, raw string, rng *rand.Rand) bool {
	t.Helper()
	s, err := CompileSchema(json.RawMessage(raw))
	if err != nil {
		if !errors.Is(err, ErrInvalidSchema) {
			t.Fatalf("CompileSchema(%s) = %v, not ErrInvalidSchema", raw, err)
		}
		return false
	}
	if s.Cost() < 1 || s.Cost() > MaxSchemaCost {
		t.Fatalf("accepted %s with cost %d", raw, s.Cost())
	}
	// A value without parts: at most the root's count and a's count.
	for _, x := range []any{json.Number("1"), json.Number("3"), "s", "long", nil, true} {
		visits, steps, err := Metered(context.Background(), s, map[string]any{"a": x})
		if errors.Is(err, ErrValidationBudget) || visits > int64(2*s.Cost()) || steps > MaxValidationSteps {
			t.Fatalf("schema %s (cost %d), a=%v: %d visits, %d steps, %v", raw, s.Cost(), x, visits, steps, err)
		}
	}
	// Any value: within the budget, or stopped by it.
	for j := 0; j < 4; j++ {
		v := map[string]any{"a": genValue(rng, 1+rng.IntN(12))}
		visits, steps, err := Metered(context.Background(), s, v)
		if visits > MaxValidationVisits+1+MaxDepth/8 || steps > MaxValidationSteps+MaxOvershoot {
			t.Fatalf("schema %s: %d visits, %d steps, %v", raw, visits, steps, err)
		}
	}
	return true
}

// costTool is a Tool with a given schema that counts its executions.
type costTool struct {
	name, schema string
	calls        atomic.Int64
}

func (c *costTool) Name() string                         { return c.name }
func (c *costTool) Description() string                  { return "a tool with a costly schema" }
func (c *costTool) Parameters() json.RawMessage          { return json.RawMessage(c.schema) }
func (c *costTool) Permissions() []permission.Permission { return nil }
func (c *costTool) Execute(context.Context, json.RawMessage) (json.RawMessage, error) {
	c.calls.Add(1)
	return json.RawMessage(`{}`), nil
}
