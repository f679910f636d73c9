package e2b

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// fakeTemplates is a catalog of a built-in base and one project template.
type fakeTemplates struct{ asked []string }

func (f *fakeTemplates) Get(_ project.Scope, name string) (apiv1.Template, error) {
	f.asked = append(f.asked, name)
	switch name {
	case "base":
		return apiv1.Template{Name: "base", Builtin: true, ID: "0123"}, nil
	case "mine":
		return apiv1.Template{Name: "p1/mine", Project: "p1", ID: "4567"}, nil
	case "mine:v1": // a tag of a template built from code
		return apiv1.Template{Name: "p1/mine:v1", Project: "p1", ID: "4567"}, nil
	}
	return apiv1.Template{}, fmt.Errorf("%w: template %q", api.ErrTemplateNotFound, name)
}

// GET /templates/aliases/{alias} answers as E2B's API does, for what
// Template.exists() reads: 200 with templateID and public, 404 when the
// alias (or its tag) does not exist, 400 for what cannot be a name;
// malformed names never reach the catalog.
func TestTemplateAlias(t *testing.T) {
	cat := &fakeTemplates{}
	h := New(Config{Aliases: cat})
	for _, c := range []struct {
		alias  string
		status int
		body   string
	}{
		{"base", 200, `{"templateID":"base","public":true}`},
		{"base:default", 200, `{"templateID":"base","public":true}`},
		{"mine", 200, `{"templateID":"mine","public":false}`},
		{"mine:v1", 200, `{"templateID":"mine","public":false}`},
		{"nosuch", 404, `{"code":404,"message":"template 'nosuch' not found"}`},
		{"base:v2", 404, `{"code":404,"message":"tag 'v2' does not exist for template 'base'"}`},
		{"Base", 400, "Invalid alias format"},
		{"..", 400, "Invalid alias format"},
		{"a/b", 400, "Invalid alias format"},
		{"base:", 400, "Invalid alias format"},
		{strings.Repeat("a", 129), 400, "Invalid alias format"},
		{"a\x00b", 400, "Invalid alias format"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/templates/aliases/x", nil)
		r.SetPathValue("alias", c.alias)
		w := httptest.NewRecorder()
		h.templateAlias(w, r)
		got := strings.TrimSpace(w.Body.String())
		if w.Code != c.status || !strings.Contains(got, c.body) || c.status != 400 && got != c.body {
			t.Errorf("alias %q: %d %s, want %d %s", c.alias, w.Code, got, c.status, c.body)
		}
	}
	for _, asked := range cat.asked {
		name, tag, tagged := strings.Cut(asked, ":")
		if !aliasPattern.MatchString(name) || tagged && !aliasPattern.MatchString(tag) {
			t.Errorf("the catalog was asked for %q", asked)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/templates/aliases/base", nil)
	r.SetPathValue("alias", "base")
	w := httptest.NewRecorder()
	New(Config{}).templateAlias(w, r)
	if w.Code != http.StatusNotFound {
		t.Errorf("without a catalog: %d, want 404", w.Code)
	}
}

// E2B's create defaults: auto-resume off unless asked for, and then no
// idle suspend either (nothing would wake the sandbox); with auto-resume
// the server's idle suspend applies.
func TestCreateAutoResumeDefault(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		in       *autoResume
		want     bool
		wantIdle int
	}{
		{nil, false, -1},
		{&autoResume{}, false, -1},
		{&autoResume{Enabled: &no}, false, -1},
		{&autoResume{Enabled: &yes}, true, 0},
	} {
		req := newSandbox{TemplateID: "base", AutoResume: c.in}
		out, msg := req.request()
		if msg != "" || out.AutoResume == nil || *out.AutoResume != c.want || out.IdleSuspendS != c.wantIdle {
			t.Errorf("autoResume %+v: auto_resume %v idle_suspend_s %d (%s), want %v %d", c.in, out.AutoResume, out.IdleSuspendS, msg, c.want, c.wantIdle)
		}
	}
}
