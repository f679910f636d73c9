package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"
)

// FieldManager names the field manager of the applies made here.
const FieldManager = "kubetest"

// Object is one manifest of a multi-document YAML stream.
type Object struct {
	APIVersion string
	Kind       string
	Name       string
	Namespace  string
	// YAML is the document alone, as sent to the server.
	YAML []byte
}

func (o Object) String() string {
	if o.Namespace != "" {
		return fmt.Sprintf("%s %s/%s", o.Kind, o.Namespace, o.Name)
	}
	return fmt.Sprintf("%s %s", o.Kind, o.Name)
}

// SplitYAML parses a multi-document YAML stream (helm template's output,
// say) into its objects, dropping empty documents. A document without
// apiVersion, kind or metadata.name is an error: the server could not
// apply it either.
func SplitYAML(docs []byte) ([]Object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(docs))
	var out []Object
	for i := 0; ; i++ {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", i+1, err)
		}
		if len(node.Content) == 0 || node.Content[0].Kind == yaml.ScalarNode && node.Content[0].Tag == "!!null" {
			continue // a document holding only comments, or "---" twice
		}
		var meta struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Metadata   struct {
				Name      string `yaml:"name"`
				Namespace string `yaml:"namespace"`
			} `yaml:"metadata"`
		}
		if err := node.Decode(&meta); err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", i+1, err)
		}
		if meta.APIVersion == "" || meta.Kind == "" || meta.Metadata.Name == "" {
			return nil, fmt.Errorf("YAML document %d: apiVersion, kind and metadata.name are required (got %q, %q, %q)",
				i+1, meta.APIVersion, meta.Kind, meta.Metadata.Name)
		}
		b, err := yaml.Marshal(&node)
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", i+1, err)
		}
		out = append(out, Object{
			APIVersion: meta.APIVersion, Kind: meta.Kind,
			Name: meta.Metadata.Name, Namespace: meta.Metadata.Namespace, YAML: b,
		})
	}
}

// DryRunApply server-side-applies every object of a multi-document YAML
// stream with dryRun=All, so the API server runs its validation and
// admission on each without storing it. Namespaces the objects name are
// created for real first, since a dry-run object in a namespace that does
// not exist is refused. The first refusal is returned with the object's
// kind and name.
//
// The server persists nothing of a dry run, so objects that depend on one
// another at admission (a Pod naming a ServiceAccount of the same stream)
// are refused; workload controllers (Deployment, StatefulSet) are not
// subject to that.
func (c *Cluster) DryRunApply(ctx context.Context, yamlDocs []byte) error {
	objs, err := SplitYAML(yamlDocs)
	if err != nil {
		return err
	}
	type target struct {
		obj  Object
		path string
	}
	targets := make([]target, 0, len(objs))
	namespaces := map[string]bool{}
	for _, o := range objs {
		res, err := c.resourceFor(ctx, o.APIVersion, o.Kind)
		if err != nil {
			return fmt.Errorf("%s: %w", o, err)
		}
		prefix := "/apis/" + o.APIVersion
		if !strings.Contains(o.APIVersion, "/") {
			prefix = "/api/" + o.APIVersion
		}
		var path string
		if res.Namespaced {
			if o.Namespace == "" {
				o.Namespace = "default"
			}
			namespaces[o.Namespace] = true
			path = prefix + "/namespaces/" + url.PathEscape(o.Namespace) + "/" + res.Name + "/" + url.PathEscape(o.Name)
		} else {
			path = prefix + "/" + res.Name + "/" + url.PathEscape(o.Name)
		}
		targets = append(targets, target{o, path})
	}
	for ns := range namespaces {
		if err := c.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	q := "?dryRun=All&fieldManager=" + FieldManager + "&force=true"
	for _, tg := range targets {
		if _, err := c.Do(ctx, http.MethodPatch, tg.path+q, "application/apply-patch+yaml", tg.obj.YAML); err != nil {
			return fmt.Errorf("server-side dry-run of %s refused: %w", tg.obj, err)
		}
	}
	return nil
}

// EnsureNamespace creates a namespace (for real) unless it exists.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]string{"name": name},
	})
	_, err := c.Do(ctx, http.MethodPost, "/api/v1/namespaces", "application/json", body)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusConflict {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// apiResource is one entry of an APIResourceList from discovery.
type apiResource struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Namespaced bool   `json:"namespaced"`
}

// resourceFor finds the REST resource serving kind in apiVersion through
// the API server's discovery, cached per group/version.
func (c *Cluster) resourceFor(ctx context.Context, apiVersion, kind string) (apiResource, error) {
	c.mu.Lock()
	list, ok := c.discovery[apiVersion]
	c.mu.Unlock()
	if !ok {
		path := "/apis/" + apiVersion
		if !strings.Contains(apiVersion, "/") {
			path = "/api/" + apiVersion
		}
		body, err := c.Do(ctx, http.MethodGet, path, "", nil)
		if err != nil {
			return apiResource{}, fmt.Errorf("discovery of %s: %w", apiVersion, err)
		}
		var rl struct {
			Resources []apiResource `json:"resources"`
		}
		if err := json.Unmarshal(body, &rl); err != nil {
			return apiResource{}, fmt.Errorf("discovery of %s: %w", apiVersion, err)
		}
		list = rl.Resources
		c.mu.Lock()
		c.discovery[apiVersion] = list
		c.mu.Unlock()
	}
	for _, r := range list {
		// Subresources (deployments/scale) share kinds with their parents.
		if r.Kind == kind && !strings.Contains(r.Name, "/") {
			return r, nil
		}
	}
	return apiResource{}, fmt.Errorf("the API server serves no kind %s in %s", kind, apiVersion)
}
