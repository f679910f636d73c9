package api

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/space-platform/space/internal/metrics"
)

// The OpenAPI document in docs/ describes exactly the routes the server has.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	New(Config{Metrics: metrics.NewRegistry()})
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			// x-space-planned marks an operation not served yet.
			if fields, ok := op.(map[string]any); ok && fields["x-space-planned"] == true {
				continue
			}
			switch method {
			case "get", "put", "post", "delete", "patch", "head":
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	served := map[string]bool{}
	for _, r := range Routes {
		served[r] = true
	}
	var missing, extra []string
	for r := range served {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !served[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("served but not in docs/openapi.yaml:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(extra) > 0 {
		t.Errorf("in docs/openapi.yaml but not served:\n  %s", strings.Join(extra, "\n  "))
	}
}
