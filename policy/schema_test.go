package policy

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

const chartSchema = `{
	"type": "object",
	"properties": {
		"kind": {"enum": ["bar", "line"]},
		"title": {"type": "string", "maxLength": 20},
		"points": {"type": "array", "items": {"type": "integer"}}
	},
	"required": ["kind"],
	"additionalProperties": false
}`

func TestValidateArguments(t *testing.T) {
	tests := []struct {
		name        string
		schema      string
		args        string
		wantChecked bool
		wantValid   bool
		wantErrors  []string // each a substring of one error, in order
	}{
		{name: "no schema", schema: "", args: `{"x":1}`},
		{name: "null schema", schema: " null ", args: `{"x":1}`},
		{name: "valid arguments", schema: chartSchema, args: `{"kind":"bar","points":[1,2]}`, wantChecked: true, wantValid: true},
		{name: "empty schema accepts anything", schema: `{}`, args: `[1,"a"]`, wantChecked: true, wantValid: true},
		{name: "enum violation", schema: chartSchema, args: `{"kind":"pie"}`, wantChecked: true,
			wantErrors: []string{"at '/kind': value must be one of 'bar', 'line'"}},
		{name: "every violation is listed", schema: chartSchema, args: `{"title":"a very long title indeed, too long","points":[1,"2"],"extra":true}`, wantChecked: true,
			wantErrors: []string{"missing property 'kind'", "additional properties 'extra' not allowed", "at '/title'", "at '/points/1'"}},
		{name: "wrong top-level type", schema: chartSchema, args: `"bar"`, wantChecked: true,
			wantErrors: []string{"got string, want object"}},
		{name: "large integers keep their precision", schema: `{"type":"integer","maximum":9007199254740993}`, args: `9007199254740994`, wantChecked: true,
			wantErrors: []string{"maximum"}},
		{name: "arguments that are not JSON", schema: chartSchema, args: `{"kind":`, wantChecked: true,
			wantErrors: []string{"the arguments are not valid JSON"}},
		{name: "empty arguments are not JSON", schema: chartSchema, args: ``, wantChecked: true,
			wantErrors: []string{"the arguments are not valid JSON"}},
		{name: "two documents are not one", schema: `{}`, args: `{} {}`, wantChecked: true,
			wantErrors: []string{"the arguments are not valid JSON"}},
		{name: "schema that is not JSON", schema: `{"type":`, args: `{}`, wantChecked: true,
			wantErrors: []string{"parameters schema is not JSON"}},
		{name: "schema that does not compile", schema: `{"type": 12}`, args: `{}`, wantChecked: true,
			wantErrors: []string{"parameters schema is invalid"}},
		{name: "schema with a bad pattern", schema: `{"type":"string","pattern":"(unclosed"}`, args: `"x"`, wantChecked: true,
			wantErrors: []string{"parameters schema is invalid"}},
		{name: "remote reference is not fetched", schema: `{"$ref": "https://example.com/schema.json"}`, args: `{}`, wantChecked: true,
			wantErrors: []string{"parameters schema is invalid", "not loaded"}},
		{name: "file reference is not read", schema: `{"$ref": "file:///etc/passwd"}`, args: `{}`, wantChecked: true,
			wantErrors: []string{"parameters schema is invalid", "not loaded"}},
		{name: "local reference works", schema: `{"$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`, args: `{"a":"x"}`, wantChecked: true,
			wantErrors: []string{"at '/a': got string, want integer"}},
		{name: "draft-07 schema by $schema", schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","required":["a"]}`, args: `{}`, wantChecked: true,
			wantErrors: []string{"missing property 'a'"}},
	}
	e := newEngine(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, validate := range map[string]func(schema, args []byte) SchemaResult{
				"func": ValidateArguments, "engine": e.ValidateArguments,
			} {
				r := validate([]byte(tt.schema), []byte(tt.args))
				if r.Checked != tt.wantChecked || r.Valid != tt.wantValid {
					t.Fatalf("%s: got checked=%v valid=%v errors=%q, want checked=%v valid=%v", name, r.Checked, r.Valid, r.Errors, tt.wantChecked, tt.wantValid)
				}
				if r.Errors == nil {
					t.Errorf("%s: Errors is nil, want a non-nil slice", name)
				}
				if tt.wantValid && len(r.Errors) != 0 {
					t.Errorf("%s: valid with errors %q", name, r.Errors)
				}
				all := strings.Join(r.Errors, "\n")
				for _, want := range tt.wantErrors {
					if !strings.Contains(all, want) {
						t.Errorf("%s: errors %q do not mention %q", name, r.Errors, want)
					}
				}
			}
		})
	}
}

func TestValidateArgumentsBoundsErrors(t *testing.T) {
	var props, args []string
	for i := range 30 {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"integer"}`, i))
		args = append(args, fmt.Sprintf(`"p%d":"%s"`, i, strings.Repeat("x", 1000)))
	}
	schema := `{"properties":{` + strings.Join(props, ",") + `}}`
	r := ValidateArguments([]byte(schema), []byte(`{`+strings.Join(args, ",")+`}`))
	if r.Valid || len(r.Errors) != maxSchemaErrors+1 || r.Errors[maxSchemaErrors] != "and 10 more" {
		t.Fatalf("got %d errors, last %q; want %d and a count of the rest", len(r.Errors), r.Errors[len(r.Errors)-1], maxSchemaErrors+1)
	}
	for _, m := range r.Errors {
		if len(m) > maxSchemaErrorLen+len("…") {
			t.Errorf("error of %d bytes", len(m))
		}
	}
}

func TestEngineValidateArgumentsCachesSchemas(t *testing.T) {
	e := newEngine(t, Options{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				schema := fmt.Sprintf(`{"type":"object","required":["k%d"]}`, j%5)
				r := e.ValidateArguments([]byte(schema), []byte(fmt.Sprintf(`{"k%d":%d}`, j%5, i)))
				if !r.Valid {
					t.Errorf("%s: %q", schema, r.Errors)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := e.schemas.lru.Len(); n != 5 {
		t.Errorf("cache holds %d schemas, want the 5 distinct ones", n)
	}
	// A bad schema is cached with its error too.
	for range 2 {
		if r := e.ValidateArguments([]byte(`{"type":12}`), []byte(`{}`)); r.Valid || !r.Checked {
			t.Fatalf("bad schema: %+v", r)
		}
	}
	if n := e.schemas.lru.Len(); n != 6 {
		t.Errorf("cache holds %d schemas, want 6", n)
	}
}
