package e2b

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/template"
)

func TestTranslateBuild(t *testing.T) {
	hash := strings.Repeat("a", 64)
	rec, auth, numbers, err := translateBuild(templateBuildStartV2{
		FromImage:         "registry.example/team/app:1",
		FromImageRegistry: &fromImageRegistry{Type: "registry", Username: "u", Password: "p"},
		StartCmd:          "serve", ReadyCmd: "check",
		Steps: []templateStep{
			{Type: "USER", Args: []string{"root"}},
			{Type: "WORKDIR", Args: []string{"/srv"}},
			{Type: "COPY", Args: []string{"src", "app/", "user", "0750"}, FilesHash: hash},
			{Type: "ENV", Args: []string{"A", "1", "B", "2"}},
			{Type: "RUN", Args: []string{"make", "user"}},
			{Type: "WORKDIR", Args: []string{"app"}},
			{Type: "run", Args: []string{"ls"}},
			{Type: "USER", Args: []string{"user"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &template.Recipe{
		From: "image:registry.example/team/app:1", Start: "serve", Ready: "check",
		User: "user", Workdir: "/srv/app", Env: map[string]string{"A": "1", "B": "2"},
		Steps: []template.Step{
			{User: "user", Workdir: "/srv", Copy: &template.CopyStep{Archive: hash, Src: "src", Dest: "app/", Mode: "0750"}},
			{Run: "make", User: "user", Workdir: "/srv", Env: map[string]string{"A": "1", "B": "2"}},
			{Run: "ls", User: "root", Workdir: "/srv/app", Env: map[string]string{"A": "1", "B": "2"}},
		},
	}
	if !reflect.DeepEqual(rec, want) {
		t.Errorf("recipe:\n%+v\nwant\n%+v", rec, want)
	}
	if auth == nil || auth.Username != "u" || auth.Password != "p" {
		t.Errorf("registry auth %+v", auth)
	}
	if !reflect.DeepEqual(numbers, []int{3, 5, 7}) {
		t.Errorf("step numbers %v, want [3 5 7]", numbers)
	}

	// E2B's default base image is space's base template.
	rec, _, _, err = translateBuild(templateBuildStartV2{FromImage: "e2bdev/base"})
	if err != nil || rec.From != "template:base" {
		t.Errorf("e2bdev/base: %v %+v", err, rec)
	}
	rec, auth, _, err = translateBuild(templateBuildStartV2{FromImage: "gcr.io/p/i", FromImageRegistry: &fromImageRegistry{Type: "gcp", ServiceAccountJSON: "{}"}})
	if err != nil || auth.Username != "_json_key" || auth.Password != "{}" || rec.From != "image:gcr.io/p/i" {
		t.Errorf("gcp: %v %+v", err, auth)
	}
	for _, bad := range []templateBuildStartV2{
		{},
		{FromImage: "a", FromTemplate: "b"},
		{FromTemplate: "base", FromImageRegistry: &fromImageRegistry{Type: "registry", Username: "u", Password: "p"}},
		{FromImage: "a", FromImageRegistry: &fromImageRegistry{Type: "registry"}},
		{FromImage: "a", FromImageRegistry: &fromImageRegistry{Type: "aws"}},
		{FromImage: "a", FromImageRegistry: &fromImageRegistry{Type: "ftp"}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "COPY", Args: []string{"a", "/b"}}}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "COPY", Args: []string{"/abs", "/b"}, FilesHash: hash}}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "COPY", Args: []string{"a", "/b"}, FilesHash: "nothex"}}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "RUN"}}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "ENV", Args: []string{"only-key"}}}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "WORKDIR", Args: []string{"a", "b"}}}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "USER", Args: []string{"x; rm -rf /"}}}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "HEALTHCHECK", Args: []string{"x"}}}},
		{FromTemplate: "base", Steps: []templateStep{{Type: "RUN", Args: []string{"a\x00b"}}}},
	} {
		if _, _, _, err := translateBuild(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

type oneKey struct{}

func (oneKey) Check(secret string) (auth.Key, error) {
	if secret != "k" {
		return auth.Key{}, errors.New("no such key")
	}
	return auth.Key{Project: "p"}, nil
}

// Without a Templates (a cluster's control plane) every build route
// answers 501 with E2B's error body, never a panic or an empty answer.
func TestTemplateRoutesWithoutBuilder(t *testing.T) {
	h := New(Config{Keys: oneKey{}})
	for _, route := range []string{
		"POST /v3/templates", "GET /templates/x/files/" + strings.Repeat("a", 64), "PUT /templates/x/files/" + strings.Repeat("a", 64),
		"POST /v2/templates/x/builds/y", "GET /templates/x/builds/y/status", "GET /templates/x/builds/y/logs",
		"GET /templates/x/tags", "POST /templates/tags", "DELETE /templates/tags",
	} {
		method, path, _ := strings.Cut(route, " ")
		req := httptest.NewRequest(method, path, strings.NewReader(`{}`))
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var body apiError
		if rec.Code != http.StatusNotImplemented || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Code != 501 || body.Message == "" {
			t.Errorf("%s: %d %s", route, rec.Code, rec.Body)
		}
	}
}
