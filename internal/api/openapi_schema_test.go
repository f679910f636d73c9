package api

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/space-platform/space/pkg/apiv1"
)

// schemaTypes are the wire types that docs/openapi.yaml describes under
// components.schemas, each by its Go name.
var schemaTypes = []any{
	apiv1.Error{},
	apiv1.CreateSandboxRequest{},
	apiv1.Sandbox{},
	apiv1.Lifecycle{},
	apiv1.SandboxList{},
	apiv1.SetTimeoutRequest{},
	apiv1.NetworkPolicy{},
	apiv1.CreateSessionRequest{},
	apiv1.Session{},
	apiv1.SessionList{},
	apiv1.OutputChunk{},
	apiv1.ExitEvent{},
	apiv1.TruncatedEvent{},
	apiv1.SignalRequest{},
	apiv1.ResizeRequest{},
	apiv1.ExecRequest{},
	apiv1.ExecResult{},
	apiv1.FileEntry{},
	apiv1.FileList{},
	apiv1.MkdirRequest{},
	apiv1.MoveRequest{},
	apiv1.Template{},
	apiv1.TemplateList{},
	apiv1.PoolStatus{},
	apiv1.SetPoolRequest{},
	apiv1.CreateTemplateRequest{},
	apiv1.APIKey{},
	apiv1.CreateKeyRequest{},
	apiv1.KeyList{},
	apiv1.CredentialRule{},
	apiv1.SetSecretRequest{},
	apiv1.Secret{},
	apiv1.SecretList{},
	apiv1.Snapshot{},
	apiv1.CreateSnapshotRequest{},
	apiv1.SnapshotList{},
	apiv1.RestoreRequest{},
	apiv1.BranchRequest{},
	apiv1.BranchResult{},
	apiv1.SandboxEvent{},
	apiv1.SandboxEventList{},
	apiv1.Node{},
	apiv1.NodeList{},
}

// jsonFields returns the JSON names of t's fields, as encoding/json sees
// them (embedded structs flattened, "-" skipped), each mapped to whether it
// is omitempty.
func jsonFields(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && tag == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, o := range jsonFields(ft) {
					names[n] = o
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if !hasTag || name == "" {
			name = f.Name
		}
		names[name] = strings.Contains(","+opts+",", ",omitempty,")
	}
	return names
}

// The schemas in docs/openapi.yaml have exactly the fields of the apiv1
// types the server encodes.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `yaml:"properties"`
				Required   []string       `yaml:"required"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	for _, v := range schemaTypes {
		typ := reflect.TypeOf(v)
		name := typ.Name()
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("docs/openapi.yaml: components.schemas has no %s (apiv1.%s)", name, name)
			continue
		}
		fields := jsonFields(typ)
		var missing, extra, badRequired, omitted []string
		for f := range fields {
			if _, ok := schema.Properties[f]; !ok {
				missing = append(missing, f)
			}
		}
		for p := range schema.Properties {
			if _, ok := fields[p]; !ok {
				extra = append(extra, p)
			}
		}
		for _, r := range schema.Required {
			omitempty, ok := fields[r]
			switch {
			case !ok:
				badRequired = append(badRequired, r)
			case omitempty:
				omitted = append(omitted, r)
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		sort.Strings(badRequired)
		sort.Strings(omitted)
		if len(missing) > 0 {
			t.Errorf("schema %s lacks properties that apiv1.%s has: %s", name, name, strings.Join(missing, ", "))
		}
		if len(extra) > 0 {
			t.Errorf("schema %s has properties that apiv1.%s lacks: %s", name, name, strings.Join(extra, ", "))
		}
		if len(badRequired) > 0 {
			t.Errorf("schema %s requires fields that apiv1.%s lacks: %s", name, name, strings.Join(badRequired, ", "))
		}
		if len(omitted) > 0 {
			t.Errorf("schema %s requires fields that apiv1.%s omits when empty (omitempty): %s", name, name, strings.Join(omitted, ", "))
		}
	}
}
