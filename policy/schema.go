package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const (
	// schemaCacheSize is how many compiled parameter schemas an Engine keeps.
	schemaCacheSize = 512
	// maxSchemaErrors bounds SchemaResult.Errors; a last entry says how many
	// more there were.
	maxSchemaErrors = 20
	// maxSchemaErrorLen bounds one message: messages may quote the
	// arguments, which are model output.
	maxSchemaErrorLen = 300
	// schemaURL is the name the parameters schema is compiled under. It
	// resolves nothing: every $ref outside the schema is refused.
	schemaURL = "urn:aguard:tool-parameters"
)

// ValidateArguments validates the parsed arguments args (JSON) against a
// tool's parameters JSON Schema (JSON), with a full JSON Schema validator
// (santhosh-tekuri/jsonschema; draft 2020-12 unless the schema's $schema
// says otherwise; "format" is an annotation, not asserted):
//
//   - no schema (empty or JSON null): Checked false;
//   - a schema that is not JSON or does not compile: Checked true, Valid
//     false, Errors naming the schema problem;
//   - arguments that are not a JSON document (empty text included): Checked
//     true, Valid false, Errors saying so;
//   - otherwise Valid tells whether the arguments satisfy the schema, and
//     Errors has one message per violation ("at '/path': what failed").
//
// The schema comes from the run input, so it is untrusted too: references
// ($ref) to anything outside the schema itself are not loaded — no files,
// no network — and make the schema invalid. Regular expressions use Go's
// RE2 engine, which runs in linear time.
//
// ValidateArguments compiles the schema on every call; Engine.ValidateArguments
// does the same with a cache of compiled schemas, for the proxy's hot path.
func ValidateArguments(schema, args []byte) SchemaResult {
	if !hasSchema(schema) {
		return SchemaResult{Errors: []string{}}
	}
	return compileSchema(schema).validate(args)
}

// ValidateArguments is the package-level ValidateArguments with the compiled
// schemas kept in a bounded LRU cache (512 schemas) keyed by the SHA-256 of
// their text, so that a tool's schema is compiled once, not once per call.
// It is safe for concurrent use.
func (e *Engine) ValidateArguments(schema, args []byte) SchemaResult {
	if !hasSchema(schema) {
		return SchemaResult{Errors: []string{}}
	}
	return e.schemas.get(schema).validate(args)
}

func hasSchema(schema []byte) bool {
	s := bytes.TrimSpace(schema)
	return len(s) > 0 && !bytes.Equal(s, []byte("null"))
}

// compiledSchema is a compiled schema, or why it did not compile.
type compiledSchema struct {
	schema *jsonschema.Schema
	err    error
}

func compileSchema(schema []byte) *compiledSchema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return &compiledSchema{err: fmt.Errorf("the tool's parameters schema is not JSON: %w", err)}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return &compiledSchema{err: fmt.Errorf("the tool's parameters schema is invalid: %w", err)}
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return &compiledSchema{err: fmt.Errorf("the tool's parameters schema is invalid: %w", err)}
	}
	return &compiledSchema{schema: s}
}

func (cs *compiledSchema) validate(args []byte) SchemaResult {
	if cs.err != nil {
		return invalid(cs.err.Error())
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return invalid("the arguments are not valid JSON: " + err.Error())
	}
	err = cs.schema.Validate(inst)
	if err == nil {
		return SchemaResult{Checked: true, Valid: true, Errors: []string{}}
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return invalid(err.Error())
	}
	var msgs []string
	collectLeaves(ve, &msgs)
	if len(msgs) == 0 { // not expected: a failure has at least one leaf
		msgs = append(msgs, ve.Error())
	}
	return invalid(msgs...)
}

// collectLeaves gathers the messages of the errors that have no causes: the
// violations themselves, not the "allOf failed" nodes above them.
func collectLeaves(ve *jsonschema.ValidationError, msgs *[]string) {
	if len(ve.Causes) == 0 {
		*msgs = append(*msgs, ve.Error())
		return
	}
	for _, c := range ve.Causes {
		collectLeaves(c, msgs)
	}
}

func invalid(msgs ...string) SchemaResult {
	extra := 0
	if len(msgs) > maxSchemaErrors {
		extra = len(msgs) - maxSchemaErrors
		msgs = msgs[:maxSchemaErrors]
	}
	out := make([]string, 0, len(msgs)+1)
	for _, m := range msgs {
		m = strings.Join(strings.Fields(m), " ") // nested causes come on indented lines
		if len(m) > maxSchemaErrorLen {
			m = strings.ToValidUTF8(m[:maxSchemaErrorLen], "") + "…"
		}
		out = append(out, m)
	}
	if extra > 0 {
		out = append(out, fmt.Sprintf("and %d more", extra))
	}
	return SchemaResult{Checked: true, Valid: false, Errors: out}
}

// refuseLoader is the schema compiler's URL loader: it loads nothing.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: references outside the tool's parameters schema are not loaded", url)
}

// schemaCache keeps compiled schemas by the SHA-256 of their text.
type schemaCache struct {
	lru *lru.Cache[[sha256.Size]byte, *compiledSchema]
}

func newSchemaCache(size int) *schemaCache {
	c, err := lru.New[[sha256.Size]byte, *compiledSchema](size)
	if err != nil { // only for a size <= 0
		panic(fmt.Sprintf("policy: schema cache of size %d: %v", size, err))
	}
	return &schemaCache{lru: c}
}

func (c *schemaCache) get(schema []byte) *compiledSchema {
	key := sha256.Sum256(schema)
	if cs, ok := c.lru.Get(key); ok {
		return cs
	}
	cs := compileSchema(schema)
	c.lru.Add(key, cs)
	return cs
}
