package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// fakeControlPlane knows some sandboxes, none of which runs; it counts
// the requests that would have resumed one.
type fakeControlPlane struct {
	sandboxes map[string]controlplane.Sandbox
	running   int
}

func (f *fakeControlPlane) Running(_ context.Context, id string) (nodeapi.Sandbox, error) {
	f.running++
	s, ok := f.sandboxes[id]
	if !ok {
		return nil, controlplane.NotFound(id)
	}
	return nil, &controlplane.StateError{ID: id, State: s.State, Want: "reach its agent"}
}

func (f *fakeControlPlane) Get(_ project.Scope, id string) (controlplane.Sandbox, error) {
	s, ok := f.sandboxes[id]
	if !ok {
		return s, controlplane.NotFound(id)
	}
	return s, nil
}

func (f *fakeControlPlane) List(project.Scope, controlplane.Filter) []controlplane.Sandbox {
	return nil
}

// A sandbox the proxy cannot reach (unknown, ended, paused without
// auto-resume) answers E2B's not-found on every port, byte for byte: the
// SDKs' isRunning() is false on a 502.
func TestNotFoundShape(t *testing.T) {
	paused := controlplane.Sandbox{ID: "paused1", State: apiv1.StateSuspended, AccessToken: "tok"}
	stopped := controlplane.Sandbox{ID: "stopped1", State: apiv1.StateStopped}
	cp := &fakeControlPlane{sandboxes: map[string]controlplane.Sandbox{paused.ID: paused, stopped.ID: stopped}}
	p := New(Config{ControlPlane: cp})
	for _, c := range []struct{ id, port, token string }{
		{"nosuch0000", "49983", ""},
		{"nosuch0000", "8080", ""},
		{"stopped1", "49983", ""},
		{"paused1", "49983", "tok"},   // with its token: still not woken
		{"paused1", "49983", "wrong"}, // not a 401 either: nothing to resume
		{"paused1", "49999", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/health", nil)
		r.Host = "127.0.0.1:3001"
		r.Header.Set(headerSandboxID, c.id)
		r.Header.Set(headerSandboxPort, c.port)
		if c.token != "" {
			r.Header.Set(headerAccessToken, c.token)
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		want := `{"sandboxId":"` + c.id + `","message":"The sandbox was not found","code":502}` + "\n"
		if w.Code != http.StatusBadGateway || w.Body.String() != want {
			t.Errorf("%s port %s: %d %q, want 502 %q", c.id, c.port, w.Code, w.Body.String(), want)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Errorf("%s port %s: Content-Type %q", c.id, c.port, ct)
		}
	}
}

// A suspended sandbox that auto-resumes is woken only by a request with
// its token; a suspend in progress counts as suspended.
func TestResumeNeedsToken(t *testing.T) {
	for _, state := range []string{apiv1.StateSuspended, apiv1.StateSuspending} {
		s := controlplane.Sandbox{ID: "auto1", State: state, AccessToken: "tok", Lifecycle: controlplane.Lifecycle{AutoResume: true}}
		cp := &fakeControlPlane{sandboxes: map[string]controlplane.Sandbox{s.ID: s}}
		p := New(Config{ControlPlane: cp})
		r := httptest.NewRequest(http.MethodGet, "/health", nil)
		r.Host = "localhost"
		r.Header.Set(headerSandboxID, s.ID)
		r.Header.Set(headerAccessToken, "wrong")
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized || cp.running != 0 {
			t.Errorf("%s, wrong token: %d %s (resume attempts %d), want 401 and none", state, w.Code, w.Body, cp.running)
		}
		r.Header.Set(headerAccessToken, "tok")
		p.ServeHTTP(httptest.NewRecorder(), r)
		if cp.running != 1 {
			t.Errorf("%s, right token: %d resume attempts, want 1", state, cp.running)
		}
	}
}

// A public sandbox's ports take requests without credentials while it
// runs, but only a request with its access token wakes it from suspend; a
// private one's traffic token wakes it as before.
func TestPortResumeNeedsCredential(t *testing.T) {
	public := controlplane.Sandbox{ID: "public1", State: apiv1.StateSuspended, AccessToken: "tok", Lifecycle: controlplane.Lifecycle{AutoResume: true}}
	private := controlplane.Sandbox{ID: "private1", State: apiv1.StateSuspended, AccessToken: "tok2", Lifecycle: controlplane.Lifecycle{AutoResume: true},
		Traffic: &controlplane.Traffic{Token: "traffic"}}
	running := controlplane.Sandbox{ID: "running1", State: apiv1.StateRunning, AccessToken: "tok3"}
	for _, c := range []struct {
		sandbox      controlplane.Sandbox
		header, val  string
		code, resume int
	}{
		{public, "", "", http.StatusUnauthorized, 0},
		{public, headerAccessToken, "wrong", http.StatusUnauthorized, 0},
		{public, headerTrafficToken, "anything", http.StatusUnauthorized, 0},
		{public, headerAccessToken, "tok", http.StatusBadGateway, 1},
		{private, headerTrafficToken, "traffic", http.StatusBadGateway, 1},
		{private, headerAccessToken, "tok2", http.StatusForbidden, 0},
		{running, "", "", http.StatusBadGateway, 1}, // no credential needed: reaches Running
	} {
		cp := &fakeControlPlane{sandboxes: map[string]controlplane.Sandbox{c.sandbox.ID: c.sandbox}}
		p := New(Config{ControlPlane: cp})
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = "8080-" + c.sandbox.ID + ".example.com"
		if c.header != "" {
			r.Header.Set(c.header, c.val)
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		if w.Code != c.code || cp.running != c.resume {
			t.Errorf("%s with %s %q: %d %s (resume attempts %d), want %d and %d", c.sandbox.ID, c.header, c.val, w.Code, w.Body, cp.running, c.code, c.resume)
		}
		if c.code == http.StatusUnauthorized && !strings.Contains(w.Body.String(), `"code":401`) {
			t.Errorf("%s: body %s, want a JSON error", c.sandbox.ID, w.Body)
		}
	}
}
