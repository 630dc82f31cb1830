package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/agcore/agrun/internal/textsafe"
)

// Limits on parameters schemas and on the work of validating one call.
//
// A schema is written by whoever wrote the tool — an uploader, an MCP
// server — and the arguments by the model or a client: both are untrusted,
// and validation runs before any sandbox limit applies. Two bounds keep it
// cheap, one checked when the schema is registered, one while a call is
// validated:
//
//   - MaxSchemaCost, at registration: the number of subschemas one argument
//     value can be checked against, with every $ref expanded. A chain of
//     $defs, each an anyOf (or allOf) of two $refs to the next, is 1.7 KiB of
//     text and 2^N visits; it is refused with ErrInvalidSchema naming the
//     count. So is a $ref cycle that never descends into the arguments
//     ({"$ref":"#"} at the root): validation could only fail on it.
//   - MaxValidationSteps and MaxValidationVisits, while validating: every
//     subschema visit is charged to the call, in proportion to the work it
//     does on the value it checks (its keys, items or bytes, its constants;
//     a pattern match is charged before it runs, the text's length times
//     the compiled pattern's size), and the call's context is checked as it
//     goes. Validation stops with ErrValidationBudget past either cap, or
//     with the context's error once the call's context is done. The
//     validator takes no context: the meter is a vocabulary attached to
//     every schema object, and it stops a validation by panicking with a
//     value of its own that ValidateContext recovers.
//
// The run-time budget is what bounds recursive schemas: a $ref that descends
// (into properties, items, ...) may recur as deep as the arguments nest
// (MaxDepth), and two alternatives that descend into the same key double
// the visits at each level — a product over levels that no count made
// before the arguments are known can bound without refusing ordinary
// recursive schemas. The worst case of one call is therefore
// MaxValidationSteps steps of work (a step is a key or item looked at, a
// byte counted or matched per pattern instruction, a sixteenth of a visit;
// measured, a few tenths of a second of CPU at most) and MaxValidationVisits
// visits' worth of error records (each counting 1 + depth/8, as a record
// copies the value's path: a few tens of MiB at most), whatever the schema
// and the arguments (at most the registry's argument cap, 1 MiB by
// default). Arguments that need more — e.g. an array of more than about
// 100,000 items checked against an item schema — are refused with
// ErrValidationBudget rather than validated.
const (
	// MaxSchemaBytes caps a tool's parameters schema.
	MaxSchemaBytes = 64 << 10
	// MaxSchemaCost caps the subschema visits one argument value can cause,
	// $refs expanded (within one level of the arguments: a $ref that
	// descends into a property or item starts the count again).
	MaxSchemaCost = 10_000
	// MaxValidationSteps caps the work of validating one call's arguments.
	MaxValidationSteps = 1 << 25
	// MaxValidationVisits caps the subschema visits of validating one
	// call's arguments (each may keep an error record until the end; one
	// on a value deeper than 8 levels counts for 1 + depth/8).
	MaxValidationVisits = 1 << 17
)

// ErrInvalidSchema is wrapped by every schema error from CompileSchema and
// Register.
var ErrInvalidSchema = errors.New("invalid parameters schema")

// ErrValidationBudget is wrapped by the error of a validation that was
// stopped because it would cost more than MaxValidationSteps or
// MaxValidationVisits.
var ErrValidationBudget = errors.New("validation budget exceeded")

// Schema is a compiled parameters schema. It is immutable and safe for
// concurrent use.
type Schema struct {
	raw  json.RawMessage
	cost int // worst-case visits of one value, see MaxSchemaCost

	mu   sync.Mutex
	idle []*compiled // compiled copies not in use by a validation
}

// compiled is one compiled copy of a schema with the meter its vocabulary
// charges. A copy serves one validation at a time: the meter is that
// validation's.
type compiled struct {
	sch *jsonschema.Schema
	m   *meter
}

// maxIdle caps the compiled copies a Schema keeps between validations; a
// validation that finds none idle compiles one.
const maxIdle = 8

// noLoader refuses every external reference: a schema may refer only to
// itself. The validator's default loader would read local files.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external reference %q refused: a schema may refer only to itself", textsafe.Truncate(url, 100))
}

// schemaURL is the base URL of every compiled schema; relative references
// resolve against it and reach noLoader.
const schemaURL = "mem:///agrun/parameters.json"

// meterURL names the vocabulary that meters validation. It has no keywords:
// it attaches a meterExt to every schema object.
const meterURL = "mem:///agrun/vocab/meter"

// CompileSchema checks and compiles a parameters schema: at most
// MaxSchemaBytes, strict JSON (no duplicate keys, bounded nesting), an object
// with "type": "object", no reference outside itself, no $ref cycle that
// does not descend into the arguments, and at most MaxSchemaCost subschema
// visits per argument value. Errors wrap ErrInvalidSchema. An empty schema
// means {"type":"object"}.
func CompileSchema(raw json.RawMessage) (*Schema, error) {
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
	c, err := compile(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	cost, err := schemaCost(c.sch)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	s := &Schema{raw: append(json.RawMessage(nil), raw...), cost: cost}
	s.idle = append(s.idle, c)
	return s, nil
}

// compile compiles a decoded schema document with the metering vocabulary.
// The compiler must never take the process down: a panic is an error.
func compile(doc any) (c *compiled, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("compiler panic: %v", r)
		}
	}()
	m := &meter{}
	leaf := 1 + maxConstSize(doc)
	jc := jsonschema.NewCompiler()
	jc.UseLoader(noLoader{})
	jc.UseRegexpEngine(m.compileRegexp)
	jc.DefaultDraft(jsonschema.Draft2020)
	jc.RegisterVocabulary(&jsonschema.Vocabulary{
		URL: meterURL,
		Compile: func(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
			return newMeterExt(m, obj, leaf), nil
		},
	})
	// Without this, draft 2019+ schemas would leave a registered vocabulary
	// inactive unless their metaschema listed it.
	jc.AssertVocabs()
	if err := jc.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	sch, err := jc.Compile(schemaURL)
	if err != nil {
		return nil, err
	}
	return &compiled{sch: sch, m: m}, nil
}

// Raw returns the schema's JSON text as given.
func (s *Schema) Raw() json.RawMessage { return s.raw }

// Cost returns the most subschema visits one argument value can cause,
// with $refs expanded: the count CompileSchema checks against
// MaxSchemaCost.
func (s *Schema) Cost() int { return s.cost }

// Validate is ValidateContext with a context that is never done.
func (s *Schema) Validate(v any) error { return s.ValidateContext(context.Background(), v) }

// ValidateContext checks a decoded instance. Errors are plain messages
// naming JSON pointers, e.g. "/city: missing"; a validation cut short
// returns an error wrapping ErrValidationBudget, or ctx's error (so
// errors.Is(err, context.DeadlineExceeded) holds) once ctx is done. It is
// safe for concurrent use.
func (s *Schema) ValidateContext(ctx context.Context, v any) (err error) {
	defer func() { // rendering the messages must not take the process down either
		if r := recover(); r != nil {
			err = fmt.Errorf("arguments could not be validated: %v", r)
		}
	}()
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.get()
	if err != nil {
		return fmt.Errorf("arguments could not be validated: %v", err)
	}
	verr, err := c.validate(ctx, v)
	s.put(c)
	if err != nil {
		return err
	}
	if verr == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return verr
	}
	return errors.New(messages(ve))
}

// ValidateJSON decodes data as Registry.Invoke decodes arguments (strict
// JSON: no duplicate keys, bounded nesting, no absurd numbers, no trailing
// data) and validates it like ValidateContext, with the same metering. It
// is how a JSON document that is not a tool's arguments — a model's
// structured answer — is checked. It is safe for concurrent use.
func (s *Schema) ValidateJSON(ctx context.Context, data []byte) error {
	v, err := decodeStrict(data)
	if err != nil {
		return err
	}
	return s.ValidateContext(ctx, v)
}

// get returns an idle compiled copy, or compiles one.
func (s *Schema) get() (*compiled, error) {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		c := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	doc, err := decodeStrict(s.raw)
	if err != nil {
		return nil, err
	}
	return compile(doc)
}

// put returns c to the idle copies.
func (s *Schema) put(c *compiled) {
	s.mu.Lock()
	if len(s.idle) < maxIdle {
		s.idle = append(s.idle, c)
	}
	s.mu.Unlock()
}

// stop is what a meter panics with to end a validation; validate recovers
// it. Nothing else panics with it.
type stop struct{ err error }

// validate runs the validator on v under a fresh meter. verr is the
// validator's verdict; err says why validation did not finish.
func (c *compiled) validate(ctx context.Context, v any) (verr, err error) {
	*c.m = meter{ctx: ctx, checkAt: checkEvery}
	defer func() {
		c.m.ctx = nil // do not keep the call's context alive
		if r := recover(); r != nil {
			if st, ok := r.(stop); ok {
				verr, err = nil, st.err
				return
			}
			verr, err = nil, fmt.Errorf("arguments could not be validated: %v", r)
		}
	}()
	return c.sch.Validate(v), nil
}

// regexpCompileSteps is what compiling a regular expression found in the
// arguments (a string checked against "format": "regex") costs per byte.
const regexpCompileSteps = 32

// compileRegexp is the validator's regular expression engine: Go's regexp
// (RE2: linear in the text matched, but by a factor of the compiled
// program's size, which a short pattern with counted repeats makes large:
// "[a-z]{1000}[a-z]{1000}[a-z]{1000}b" takes over a minute on 1 MiB). Each
// match is charged before it runs, the text's length times the program's
// size, so a costly one is refused instead of run.
func (m *meter) compileRegexp(expr string) (jsonschema.Regexp, error) {
	m.spend(int64(len(expr)) * regexpCompileSteps) // while validating: the text is an argument
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	insts := int64(1)
	if m.ctx == nil { // compiling the schema: this pattern will be matched
		if p, err := syntax.Parse(expr, syntax.Perl); err == nil {
			if prog, err := syntax.Compile(p.Simplify()); err == nil {
				insts = int64(len(prog.Inst))
			}
		}
	}
	return &meteredRegexp{re: re, m: m, insts: insts}, nil
}

// meteredRegexp is a schema pattern whose matches are charged to the
// validation that runs them.
type meteredRegexp struct {
	re    *regexp.Regexp
	m     *meter
	insts int64
}

// MatchString charges the match and runs it.
func (r *meteredRegexp) MatchString(s string) bool {
	r.m.spend((1 + int64(len(s))) * r.insts)
	return r.re.MatchString(s)
}

// String returns the pattern's source text.
func (r *meteredRegexp) String() string { return r.re.String() }

// checkEvery is how many steps pass between two looks at the context.
const checkEvery = 1 << 12

// visitSteps is the least a subschema visit costs: the validator allocates
// its state and, on a failure, an error record.
const visitSteps = 16

// meter counts the work of one validation. The validator calls the
// meterExt of every schema object it visits (except visits that end early:
// a failed type, const or enum check, a boolean schema, a $ref cycle; their
// cost is charged to the visit of their parent), after the visit's own work
// and its subschemas.
type meter struct {
	ctx     context.Context
	steps   int64
	visits  int64
	checkAt int64
}

// visit charges one subschema visit of n steps on a value depth levels
// deep in the arguments. A visit counts for more than one past depth 8:
// an error record copies the value's path, and a deep bomb keeps them all.
func (m *meter) visit(n int64, depth int) {
	m.visits += 1 + int64(depth)/8
	m.spend(n)
}

// spend adds n steps, and stops the validation past a budget or once the
// context is done. Outside a validation (while compiling) it does nothing.
func (m *meter) spend(n int64) {
	if m.ctx == nil {
		return
	}
	m.steps += n
	if m.steps > MaxValidationSteps || m.visits > MaxValidationVisits {
		panic(stop{fmt.Errorf("%w: validating these arguments against the tool's schema takes more than %d steps or %d subschema visits",
			ErrValidationBudget, MaxValidationSteps, MaxValidationVisits)})
	}
	if m.steps >= m.checkAt {
		m.checkAt = m.steps + checkEvery
		if err := m.ctx.Err(); err != nil {
			panic(stop{err})
		}
	}
}

// meterExt charges one schema object's visits. Its weights are the cost of
// the object's own work per visit (perVisit), per key of an object value
// (perKey: property lookups), per item of an array value (perItem) and per
// byte of a string value (perByte: length counts, formats), each including
// what its direct subschemas may cost if their visit ends early (a const
// or enum compared). Pattern matches are charged by meteredRegexp.
type meterExt struct {
	m                                  *meter
	perVisit, perKey, perItem, perByte int64
	uniqueItems                        bool
}

func (e *meterExt) Validate(vc *jsonschema.ValidatorContext, v any) {
	n := e.perVisit
	switch v := v.(type) {
	case map[string]any:
		n += int64(len(v)) * e.perKey
	case []any:
		n += int64(len(v)) * e.perItem
		if e.uniqueItems { // every item hashed, whole
			n += valueSize(v)
		}
	case string:
		n += int64(len(v)) * e.perByte
	}
	e.m.visit(n, len(vc.ValueLocation()))
}

// Keywords whose value is one subschema applied to the same value, an
// array of them, or an object of them.
var (
	inPlaceOne = []string{"not", "if", "then", "else"}
	inPlaceArr = []string{"allOf", "anyOf", "oneOf"}
	inPlaceMap = []string{"dependentSchemas", "dependencies"}
	refKeys    = []string{"$ref", "$dynamicRef", "$recursiveRef"}
	perKeyOne  = []string{"additionalProperties", "unevaluatedProperties", "propertyNames"}
	perItemOne = []string{"additionalItems", "contains", "unevaluatedItems"}
)

// newMeterExt weighs the schema object obj. leaf bounds what a $ref target
// whose visit ends early may cost (1 + the largest const or enum).
func newMeterExt(m *meter, obj map[string]any, leaf int64) *meterExt {
	e := &meterExt{m: m, perVisit: visitSteps + constSize(obj["const"]) + constSize(obj["enum"]), perKey: 1, perItem: 1}
	early := func(child any) int64 { // cost of a direct subschema's visit that ends early
		c, ok := child.(map[string]any)
		if !ok {
			return 1
		}
		n := 1 + constSize(c["const"]) + constSize(c["enum"])
		for _, k := range refKeys {
			if _, ok := c[k]; ok {
				n += leaf
			}
		}
		return n
	}
	for _, k := range refKeys {
		if _, ok := obj[k]; ok {
			e.perVisit += leaf
		}
	}
	for _, k := range inPlaceOne {
		if c, ok := obj[k]; ok {
			e.perVisit += early(c)
		}
	}
	for _, k := range inPlaceArr {
		arr, _ := obj[k].([]any)
		for _, c := range arr {
			e.perVisit += early(c)
		}
	}
	for _, k := range inPlaceMap {
		mp, _ := obj[k].(map[string]any)
		for _, c := range mp {
			e.perVisit += early(c)
		}
	}
	// A key meets at most one of properties, every pattern, and the
	// keywords applying to all keys.
	if mp, ok := obj["properties"].(map[string]any); ok {
		e.perKey += maxEarly(mp, early)
	}
	if mp, ok := obj["patternProperties"].(map[string]any); ok {
		for _, c := range mp {
			e.perKey += early(c)
		}
	}
	for _, k := range perKeyOne {
		if c, ok := obj[k]; ok {
			e.perKey += early(c)
		}
	}
	// An item meets at most one of prefixItems (items as an array), items,
	// and the keywords applying to all items.
	for _, k := range []string{"prefixItems", "items"} {
		switch c := obj[k].(type) {
		case []any:
			var most int64
			for _, x := range c {
				most = max(most, early(x))
			}
			e.perItem += most
		case map[string]any, bool:
			e.perItem += early(c)
		}
	}
	for _, k := range perItemOne {
		if c, ok := obj[k]; ok {
			e.perItem += early(c)
		}
	}
	e.uniqueItems, _ = obj["uniqueItems"].(bool)
	for _, k := range []string{"minLength", "maxLength", "format"} {
		if _, ok := obj[k]; ok {
			e.perByte++
		}
	}
	return e
}

func maxEarly(mp map[string]any, early func(any) int64) int64 {
	var most int64
	for _, c := range mp {
		most = max(most, early(c))
	}
	return most
}

// constSize is what comparing a value with the constant v may cost: one
// per JSON value, one per 16 bytes of text. Zero for no constant.
func constSize(v any) int64 {
	if v == nil {
		return 0
	}
	return valueSize(v)
}

// valueSize is the size of a decoded JSON value in the units of constSize.
func valueSize(v any) int64 {
	switch v := v.(type) {
	case map[string]any:
		n := int64(1)
		for k, x := range v {
			n += int64(len(k))/16 + valueSize(x)
		}
		return n
	case []any:
		n := int64(1)
		for _, x := range v {
			n += valueSize(x)
		}
		return n
	case string:
		return 1 + int64(len(v))/16
	case json.Number:
		return 1 + int64(len(v))/16
	}
	return 1
}

// maxConstSize is the largest constSize of a const or enum anywhere in the
// schema document doc.
func maxConstSize(doc any) int64 {
	var most int64
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			most = max(most, constSize(v["const"]), constSize(v["enum"]))
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return most
}

// schemaCost computes the most subschema visits one argument value can
// cause when some subschema of root is applied to it: for a subschema s,
// cost(s) = 1 + the sum of cost(c) over the subschemas c applied to the
// same value (allOf, anyOf, oneOf, not, if, then, else, dependentSchemas,
// $ref, $dynamicRef, $recursiveRef), memoised so the computation is linear
// in the compiled schema. Subschemas that apply to parts of the value
// (properties, items, ...) start a count of their own on that part, and
// the largest count is the schema's cost. A dynamic reference counts every
// subschema it may resolve to. A cycle of same-value subschemas is an
// error: the validator would report it as a failure on every value that
// reaches it.
func schemaCost(root *jsonschema.Schema) (int, error) {
	nodes := reachable(root)
	dynamic := map[string][]*jsonschema.Schema{}
	var recursive []*jsonschema.Schema
	for _, s := range nodes {
		if s.DynamicAnchor != "" {
			dynamic[s.DynamicAnchor] = append(dynamic[s.DynamicAnchor], s)
		}
		if s.RecursiveAnchor {
			recursive = append(recursive, s)
		}
	}
	const (
		onPath = -1 // being computed
		capped = MaxSchemaCost + 1
	)
	memo := map[*jsonschema.Schema]int{}
	var cycle *jsonschema.Schema
	var cost func(s *jsonschema.Schema) int
	cost = func(s *jsonschema.Schema) int {
		if c, ok := memo[s]; ok {
			if c == onPath && cycle == nil {
				cycle = s
			}
			return max(c, 0)
		}
		memo[s] = onPath
		n := 1
		sameValue(s, dynamic, recursive, func(c *jsonschema.Schema) {
			if cycle == nil {
				n = min(n+cost(c), capped)
			}
		})
		memo[s] = n
		return n
	}
	most, where := 0, root
	for _, s := range nodes {
		if c := cost(s); c > most {
			most, where = c, s
		}
		if cycle != nil {
			return 0, fmt.Errorf("subschema %s refers back to itself without descending into the arguments (a $ref cycle): no value can pass it", location(cycle))
		}
	}
	if most > MaxSchemaCost {
		return 0, fmt.Errorf("validating one value against %s visits more than %d subschemas with $refs expanded, the most a schema may cost",
			location(where), MaxSchemaCost)
	}
	return most, nil
}

// location names a compiled subschema by its JSON pointer in the schema.
func location(s *jsonschema.Schema) string {
	loc := strings.TrimPrefix(s.Location, schemaURL)
	if loc == "" || loc == "#" {
		loc = "#/"
	}
	return textsafe.Truncate(loc, 100)
}

// sameValue calls f on every subschema s applies to the value s checks.
func sameValue(s *jsonschema.Schema, dynamic map[string][]*jsonschema.Schema, recursive []*jsonschema.Schema, f func(*jsonschema.Schema)) {
	one := func(c *jsonschema.Schema) {
		if c != nil {
			f(c)
		}
	}
	one(s.Ref)
	if r := s.RecursiveRef; r != nil {
		f(r)
		if r.RecursiveAnchor {
			for _, c := range recursive {
				if c != r {
					f(c)
				}
			}
		}
	}
	if d := s.DynamicRef; d != nil && d.Ref != nil {
		f(d.Ref)
		if d.Anchor != "" && d.Ref.DynamicAnchor == d.Anchor {
			for _, c := range dynamic[d.Anchor] {
				if c != d.Ref {
					f(c)
				}
			}
		}
	}
	one(s.Not)
	for _, c := range s.AllOf {
		f(c)
	}
	for _, c := range s.AnyOf {
		f(c)
	}
	for _, c := range s.OneOf {
		f(c)
	}
	one(s.If)
	one(s.Then)
	one(s.Else)
	for _, c := range s.DependentSchemas {
		f(c)
	}
	for _, d := range s.Dependencies {
		if c, ok := d.(*jsonschema.Schema); ok {
			f(c)
		}
	}
}

// parts calls f on every subschema s applies to a part of the value it
// checks (a property, a name, an item, decoded content).
func parts(s *jsonschema.Schema, f func(*jsonschema.Schema)) {
	one := func(c any) {
		if c, ok := c.(*jsonschema.Schema); ok && c != nil {
			f(c)
		}
	}
	for _, c := range s.Properties {
		f(c)
	}
	for _, c := range s.PatternProperties {
		f(c)
	}
	one(s.AdditionalProperties)
	one(s.PropertyNames)
	one(s.UnevaluatedProperties)
	switch it := s.Items.(type) {
	case *jsonschema.Schema:
		one(it)
	case []*jsonschema.Schema:
		for _, c := range it {
			f(c)
		}
	}
	one(s.AdditionalItems)
	for _, c := range s.PrefixItems {
		f(c)
	}
	one(s.Items2020)
	one(s.Contains)
	one(s.UnevaluatedItems)
	one(s.ContentSchema)
}

// reachable lists every subschema reachable from root, root first.
func reachable(root *jsonschema.Schema) []*jsonschema.Schema {
	seen := map[*jsonschema.Schema]bool{}
	var out []*jsonschema.Schema
	stack := []*jsonschema.Schema{root}
	push := func(c *jsonschema.Schema) {
		if !seen[c] {
			stack = append(stack, c)
		}
	}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
		sameValue(s, nil, nil, push)
		parts(s, push)
	}
	return out
}

// maxMsgs caps the messages of one validation error.
const maxMsgs = 10

// messages renders the leaves of a validation error tree: the first
// maxMsgs in full, then how many more there are.
func messages(ve *jsonschema.ValidationError) string {
	var msgs []string
	more := 0
	collect(ve, &msgs, &more)
	if len(msgs) == 0 {
		return "arguments do not match the schema"
	}
	if more > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(msgs, "; ")
}

// collect appends one message per leaf of the validation error tree, up to
// maxMsgs; the leaves past those are only counted.
func collect(ve *jsonschema.ValidationError, msgs *[]string, more *int) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collect(c, msgs, more)
		}
		return
	}
	if req, ok := ve.ErrorKind.(*kind.Required); ok {
		for _, m := range req.Missing {
			if len(*msgs) >= maxMsgs {
				*more++
				continue
			}
			*msgs = append(*msgs, pointer(append(append([]string(nil), ve.InstanceLocation...), m))+": missing")
		}
		return
	}
	if len(*msgs) >= maxMsgs {
		*more++
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
