package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The spec's event streams and links are what the API fuzz
// (test/e2e/fuzz_test.go) reads: a stream's schema describes one event
// (schemathesis validates every event against it; a `{type: string}` there
// failed every stream), and every link names an operation the document
// has, with parameters of that operation.
func TestOpenAPIStreamsAndLinks(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type schema struct {
		Type       string         `yaml:"type"`
		Properties map[string]any `yaml:"properties"`
	}
	type response struct {
		Content map[string]struct {
			Schema schema `yaml:"schema"`
		} `yaml:"content"`
		Links map[string]struct {
			OperationID string            `yaml:"operationId"`
			Parameters  map[string]string `yaml:"parameters"`
		} `yaml:"links"`
	}
	type param struct {
		Name string `yaml:"name"`
		Ref  string `yaml:"$ref"`
	}
	type operation struct {
		OperationID string              `yaml:"operationId"`
		Parameters  []param             `yaml:"parameters"`
		Responses   map[string]response `yaml:"responses"`
	}
	var doc struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Parameters map[string]param `yaml:"parameters"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	name := func(p param) string {
		if p.Ref != "" {
			return doc.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")].Name
		}
		return p.Name
	}
	ops := map[string]map[string]bool{} // operationId → its parameters
	type link struct {
		from, name, to string
		params         []string
	}
	var links []link
	streams := 0
	for path, item := range doc.Paths {
		var shared []param
		if n, ok := item["parameters"]; ok {
			if err := n.Decode(&shared); err != nil {
				t.Fatalf("%s parameters: %v", path, err)
			}
		}
		for method, n := range item {
			if method == "parameters" {
				continue
			}
			var op operation
			if err := n.Decode(&op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			params := map[string]bool{}
			for _, p := range append(shared, op.Parameters...) {
				params[name(p)] = true
			}
			ops[op.OperationID] = params
			for code, r := range op.Responses {
				if c, ok := r.Content["text/event-stream"]; ok {
					streams++
					if c.Schema.Type != "object" || c.Schema.Properties["data"] == nil {
						t.Errorf("%s %s %s: a text/event-stream schema must describe one event (an object with data), not %q", method, path, code, c.Schema.Type)
					}
				}
				for ln, l := range r.Links {
					var ps []string
					for p := range l.Parameters {
						ps = append(ps, p)
					}
					links = append(links, link{op.OperationID, ln, l.OperationID, ps})
				}
			}
		}
	}
	if streams == 0 || len(links) == 0 {
		t.Fatalf("found %d event streams and %d links; the parse is wrong", streams, len(links))
	}
	for _, l := range links {
		target, ok := ops[l.to]
		if !ok {
			t.Errorf("%s: link %s names no operation %q", l.from, l.name, l.to)
			continue
		}
		for _, p := range l.params {
			if !target[p] {
				t.Errorf("%s: link %s sets %q, which %s does not have", l.from, l.name, p, l.to)
			}
		}
	}
}

// The server refuses unknown fields in every JSON body (readJSON), so the
// spec says so of every request body schema: with additionalProperties
// left open, schemathesis generated bodies the spec allows and the server
// answered 400, on most operations.
func TestOpenAPIRequestBodiesAreClosed(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type schema struct {
		Ref                  string `yaml:"$ref"`
		Type                 string `yaml:"type"`
		AdditionalProperties any    `yaml:"additionalProperties"`
	}
	var doc struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Schemas map[string]schema `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	bodies := 0
	for path, ops := range doc.Paths {
		for method, n := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				RequestBody struct {
					Content map[string]struct {
						Schema schema `yaml:"schema"`
					} `yaml:"content"`
				} `yaml:"requestBody"`
			}
			if err := n.Decode(&op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			c, ok := op.RequestBody.Content["application/json"]
			if !ok || c.Schema.Ref == "" {
				continue
			}
			bodies++
			name := strings.TrimPrefix(c.Schema.Ref, "#/components/schemas/")
			if sc := doc.Components.Schemas[name]; sc.Type == "object" && sc.AdditionalProperties != false {
				t.Errorf("%s %s: request body %s does not say additionalProperties: false, but the server refuses unknown fields", method, path, name)
			}
		}
	}
	if bodies == 0 {
		t.Fatal("found no JSON request body; the parse is wrong")
	}
}
