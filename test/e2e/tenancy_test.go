package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/internal/api"
	"github.com/space-platform/space/internal/e2b"
	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// tenant is one project with two keys.
type tenant struct {
	project    string
	keys       [2]*apiv1.APIKey
	clients    [2]*client.Client
	secretKeys [2]string
}

// newTenant creates a project's two keys (with the admin key); they are
// revoked when the test ends.
func newTenant(t *testing.T, name string) *tenant {
	t.Helper()
	ctx := testContext(t)
	tn := &tenant{project: fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%1e9)}
	for i := range tn.keys {
		k, err := env.client.CreateKey(ctx, apiv1.CreateKeyRequest{Name: fmt.Sprintf("%s-%d", name, i), Project: tn.project})
		if err != nil {
			t.Fatalf("create key of %s: %v", tn.project, err)
		}
		if k.Project != tn.project || k.Admin {
			t.Fatalf("key %+v: want a non-admin key of project %s", k, tn.project)
		}
		tn.keys[i], tn.secretKeys[i] = k, k.Key
		tn.clients[i] = client.New(env.srv.URL, k.Key)
		t.Cleanup(func() { _ = env.client.RevokeKey(context.Background(), k.ID) })
	}
	return tn
}

// rawResponse is a raw answer of the native API.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
}

func (r rawResponse) message() string {
	var e apiv1.Error
	_ = json.Unmarshal(r.body, &e)
	return e.Message
}

// raw sends a request to base (the native or the E2B API) with key.
func raw(t *testing.T, base, key, method, path, body string) rawResponse {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(testContext(t), method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != "" && !strings.Contains(path, "/files") && !strings.Contains(path, "/stdin") {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: data}
}

// ids names the objects a cross-project request aims at: project A's, or
// ids that exist nowhere, so that the two answers can be compared.
type ids struct {
	sandbox, snapshot, snapshotID, session, template, templateID, key, secret, project string
	volume, volumeName                                                                 string
}

func (i ids) replaceIn(s string) string {
	for _, v := range []string{i.sandbox, i.snapshotID, i.session, i.templateID, i.template, i.key, i.secret, i.project, i.volume, i.volumeName} {
		if v != "" {
			s = strings.ReplaceAll(s, v, "<ID>")
		}
	}
	return s
}

// routeCase is what a key of project B gets from one route aimed at
// project A's objects.
type routeCase struct {
	path func(ids) string
	body func(ids) string
	want int
	// absent, for a 200 list, is what the body must not contain.
	absent func(ids) []string
}

func sbx(suffix string) func(ids) string {
	return func(i ids) string { return "/v1/sandboxes/" + i.sandbox + suffix }
}

func fixed(s string) func(ids) string { return func(ids) string { return s } }

// nativeRouteCases covers every route of api.Routes; a route missing here
// fails the test, so a new route must say what another project gets.
func nativeRouteCases() map[string]routeCase {
	nf := http.StatusNotFound
	sess := func(suffix string) func(ids) string {
		return func(i ids) string { return "/v1/sandboxes/" + i.sandbox + "/sessions/" + i.session + suffix }
	}
	tpl := func(suffix string) func(ids) string {
		return func(i ids) string { return "/v1/templates/" + i.template + suffix }
	}
	notListed := func(i ids) []string { return []string{i.sandbox} }
	return map[string]routeCase{
		"GET /healthz": {path: fixed("/healthz"), want: 200},
		"GET /metrics": {path: fixed("/metrics"), want: 200},

		"POST /v1/sandboxes": {path: fixed("/v1/sandboxes"), body: func(i ids) string {
			return `{"snapshot":"` + i.snapshotID + `"}`
		}, want: nf},
		"GET /v1/sandboxes":                 {path: fixed("/v1/sandboxes"), want: 200, absent: notListed},
		"GET /v1/sandboxes/{id}":            {path: sbx(""), want: nf},
		"GET /v1/sandboxes/{id}/wait":       {path: sbx("/wait?state=stopped&timeout_s=1"), want: nf},
		"DELETE /v1/sandboxes/{id}":         {path: sbx(""), want: nf},
		"POST /v1/sandboxes/{id}/timeout":   {path: sbx("/timeout"), body: fixed(`{"timeout_s":5}`), want: nf},
		"PUT /v1/sandboxes/{id}/network":    {path: sbx("/network"), body: fixed(`{"allow_internet":false}`), want: nf},
		"GET /v1/sandboxes/{id}/events":     {path: sbx("/events"), want: nf},
		"GET /v1/sandboxes/{id}/metrics":    {path: sbx("/metrics"), want: nf},
		"POST /v1/sandboxes/{id}/pause":     {path: sbx("/pause"), want: nf},
		"POST /v1/sandboxes/{id}/resume":    {path: sbx("/resume"), want: nf},
		"POST /v1/sandboxes/{id}/suspend":   {path: sbx("/suspend"), want: nf},
		"POST /v1/sandboxes/{id}/snapshots": {path: sbx("/snapshots"), body: fixed(`{"name":"evil"}`), want: nf},
		"GET /v1/sandboxes/{id}/snapshots":  {path: sbx("/snapshots"), want: nf},
		"DELETE /v1/sandboxes/{id}/snapshots/{name}": {path: func(i ids) string {
			return "/v1/sandboxes/" + i.sandbox + "/snapshots/" + i.snapshot
		}, want: nf},
		"POST /v1/sandboxes/{id}/restore": {path: sbx("/restore"), body: func(i ids) string { return `{"snapshot":"` + i.snapshot + `"}` }, want: nf},
		"POST /v1/sandboxes/{id}/branch":  {path: sbx("/branch"), body: fixed(`{"count":1}`), want: nf},

		"POST /v1/sandboxes/{id}/sessions":              {path: sbx("/sessions"), body: fixed(`{"cmd":["/bin/sh","-c","echo pwned > /tmp/mark"]}`), want: nf},
		"GET /v1/sandboxes/{id}/sessions":               {path: sbx("/sessions"), want: nf},
		"GET /v1/sandboxes/{id}/sessions/{sid}":         {path: sess(""), want: nf},
		"GET /v1/sandboxes/{id}/sessions/{sid}/attach":  {path: sess("/attach"), want: nf},
		"POST /v1/sandboxes/{id}/sessions/{sid}/stdin":  {path: sess("/stdin?close=true"), body: fixed("pwned\n"), want: nf},
		"POST /v1/sandboxes/{id}/sessions/{sid}/signal": {path: sess("/signal"), body: fixed(`{"signal":"KILL"}`), want: nf},
		"POST /v1/sandboxes/{id}/sessions/{sid}/resize": {path: sess("/resize"), body: fixed(`{"cols":10,"rows":10}`), want: nf},
		"POST /v1/sandboxes/{id}/exec":                  {path: sbx("/exec"), body: fixed(`{"cmd":["/bin/sh","-c","echo pwned > /tmp/mark"]}`), want: nf},
		"GET /v1/sandboxes/{id}/files":                  {path: sbx("/files?path=/tmp/mark"), want: nf},
		"PUT /v1/sandboxes/{id}/files":                  {path: sbx("/files?path=/tmp/mark"), body: fixed("pwned"), want: nf},
		"DELETE /v1/sandboxes/{id}/files":               {path: sbx("/files?path=/tmp/mark"), want: nf},
		"POST /v1/sandboxes/{id}/files/mkdir":           {path: sbx("/files/mkdir"), body: fixed(`{"path":"/tmp/evil"}`), want: nf},
		"POST /v1/sandboxes/{id}/files/move":            {path: sbx("/files/move"), body: fixed(`{"from":"/tmp/mark","to":"/tmp/moved"}`), want: nf},
		"POST /v1/templates":                            {path: fixed("/v1/templates"), body: func(i ids) string { return `{"name":"evil","recipe":"from: template:` + i.templateID + `\n"}` }, want: http.StatusBadRequest},
		"GET /v1/templates":                             {path: fixed("/v1/templates"), want: 200, absent: func(i ids) []string { return []string{i.templateID} }},
		"GET /v1/templates/{name}":                      {path: tpl(""), want: nf},
		"GET /v1/templates/{name}/logs":                 {path: tpl("/logs"), want: nf},
		"DELETE /v1/templates/{name}":                   {path: tpl(""), want: nf},
		"PUT /v1/templates/{name}/pool":                 {path: tpl("/pool"), body: fixed(`{"size":1}`), want: nf},
		"POST /v1/keys":                                 {path: fixed("/v1/keys"), body: func(i ids) string { return `{"name":"evil","project":"` + i.project + `"}` }, want: http.StatusForbidden},
		"GET /v1/keys":                                  {path: fixed("/v1/keys"), want: http.StatusForbidden},
		"DELETE /v1/keys/{id}":                          {path: func(i ids) string { return "/v1/keys/" + i.key }, want: http.StatusForbidden},
		"POST /v1/secrets":                              {path: fixed("/v1/secrets"), body: func(i ids) string { return `{"name":"` + i.secret + `","value":"pwned","project":"` + i.project + `"}` }, want: http.StatusForbidden},
		"GET /v1/secrets":                               {path: fixed("/v1/secrets"), want: http.StatusForbidden},
		"DELETE /v1/secrets/{name}":                     {path: func(i ids) string { return "/v1/secrets/" + i.secret + "?project=" + i.project }, want: http.StatusForbidden},
		"GET /v1/projects":                              {path: fixed("/v1/projects"), want: http.StatusForbidden},
		"GET /v1/projects/{name}":                       {path: func(i ids) string { return "/v1/projects/" + i.project }, want: http.StatusForbidden},
		"PUT /v1/projects/{name}":                       {path: func(i ids) string { return "/v1/projects/" + i.project }, body: fixed(`{"max_sandboxes":0}`), want: http.StatusForbidden},
		"GET /v1/nodes":                                 {path: fixed("/v1/nodes"), want: http.StatusForbidden},
		"GET /v1/nodes/{id}":                            {path: fixed("/v1/nodes/local"), want: http.StatusForbidden},
		"POST /v1/nodes/{id}/cordon":                    {path: fixed("/v1/nodes/local/cordon"), want: http.StatusForbidden},
		"POST /v1/nodes/{id}/uncordon":                  {path: fixed("/v1/nodes/local/uncordon"), want: http.StatusForbidden},
		"POST /v1/nodes/{id}/drain":                     {path: fixed("/v1/nodes/local/drain"), want: http.StatusForbidden},
		"DELETE /v1/nodes/{id}":                         {path: fixed("/v1/nodes/local?force=true"), want: http.StatusForbidden},

		"POST /v1/volumes":                  {path: fixed("/v1/volumes"), body: fixed(`{"name":"Not A Name"}`), want: http.StatusBadRequest},
		"GET /v1/volumes":                   {path: fixed("/v1/volumes"), want: 200, absent: func(i ids) []string { return []string{i.volume, i.volumeName} }},
		"GET /v1/volumes/{id}":              {path: vol(""), want: nf},
		"DELETE /v1/volumes/{id}":           {path: vol(""), want: nf},
		"GET /v1/volumes/{id}/files":        {path: vol("/files?path=/mark"), want: nf},
		"PUT /v1/volumes/{id}/files":        {path: vol("/files?path=/mark"), body: fixed("pwned"), want: nf},
		"DELETE /v1/volumes/{id}/files":     {path: vol("/files?path=/mark"), want: nf},
		"POST /v1/volumes/{id}/files/mkdir": {path: vol("/files/mkdir"), body: fixed(`{"path":"/evil"}`), want: nf},
	}
}

// vol is a path of a volume's native routes.
func vol(suffix string) func(ids) string {
	return func(i ids) string { return "/v1/volumes/" + i.volume + suffix }
}

// e2bRouteCases covers every route of e2b.Routes.
func e2bRouteCases() map[string]routeCase {
	nf := http.StatusNotFound
	e := func(prefix, suffix string) func(ids) string {
		return func(i ids) string { return prefix + i.sandbox + suffix }
	}
	fromSnapshot := func(i ids) string { return `{"templateID":"` + i.snapshotID + `","timeout":60}` }
	notListed := func(i ids) []string { return []string{i.sandbox} }
	return map[string]routeCase{
		"POST /sandboxes":                 {path: fixed("/sandboxes"), body: fromSnapshot, want: nf},
		"POST /v2/sandboxes":              {path: fixed("/v2/sandboxes"), body: fromSnapshot, want: nf},
		"GET /sandboxes":                  {path: fixed("/sandboxes"), want: 200, absent: notListed},
		"GET /v2/sandboxes":               {path: fixed("/v2/sandboxes"), want: 200, absent: notListed},
		"GET /sandboxes/{id}":             {path: e("/sandboxes/", ""), want: nf},
		"DELETE /sandboxes/{id}":          {path: e("/sandboxes/", ""), want: nf},
		"POST /sandboxes/{id}/timeout":    {path: e("/sandboxes/", "/timeout"), body: fixed(`{"timeout":5}`), want: nf},
		"POST /sandboxes/{id}/pause":      {path: e("/sandboxes/", "/pause"), want: nf},
		"POST /sandboxes/{id}/resume":     {path: e("/sandboxes/", "/resume"), body: fixed(`{"timeout":60}`), want: nf},
		"POST /sandboxes/{id}/connect":    {path: e("/sandboxes/", "/connect"), body: fixed(`{"timeout":60}`), want: nf},
		"POST /v2/sandboxes/{id}/connect": {path: e("/v2/sandboxes/", "/connect"), body: fixed(`{"timeout":60}`), want: nf},
		"POST /sandboxes/{id}/fork":       {path: e("/sandboxes/", "/fork"), body: fixed(`{}`), want: nf},
		"GET /sandboxes/{id}/metrics":     {path: e("/sandboxes/", "/metrics"), want: nf},
		"GET /sandboxes/metrics":          {path: e("/sandboxes/metrics?sandbox_ids=", ""), want: 200, absent: notListed},
		"POST /sandboxes/{id}/snapshots":  {path: e("/sandboxes/", "/snapshots"), body: fixed(`{}`), want: nf},
		"GET /snapshots":                  {path: fixed("/snapshots"), want: 200, absent: func(i ids) []string { return []string{i.snapshotID} }},
		"DELETE /templates/{id}":          {path: func(i ids) string { return "/templates/" + i.snapshotID }, want: nf},
		"GET /templates/aliases/{alias}":  {path: func(i ids) string { return "/templates/aliases/" + i.template }, want: nf},
		"PUT /sandboxes/{id}/network":     {path: e("/sandboxes/", "/network"), body: fixed(`{}`), want: nf},
		// Secrets: reads are confined to the key's project, writes need
		// an admin key (403 whatever the name).
		"GET /secrets":               {path: fixed("/secrets"), want: 200, absent: func(i ids) []string { return []string{i.secret} }},
		"POST /secrets":              {path: fixed("/secrets"), body: func(i ids) string { return `{"name":"` + i.secret + `","value":"b"}` }, want: http.StatusForbidden},
		"GET /secrets/{secretID}":    {path: func(i ids) string { return "/secrets/" + i.secret }, want: nf},
		"POST /secrets/{secretID}":   {path: func(i ids) string { return "/secrets/" + i.secret }, body: fixed(`{"value":"b"}`), want: http.StatusForbidden},
		"DELETE /secrets/{secretID}": {path: func(i ids) string { return "/secrets/" + i.secret }, want: http.StatusForbidden},
		"GET /health":                {path: fixed("/health"), want: 200},

		"POST /volumes":                         {path: fixed("/volumes"), body: fixed(`{"name":""}`), want: http.StatusBadRequest},
		"GET /volumes":                          {path: fixed("/volumes"), want: 200, absent: func(i ids) []string { return []string{i.volume, i.volumeName} }},
		"GET /volumes/{volumeID}":               {path: func(i ids) string { return "/volumes/" + i.volume }, want: nf},
		"DELETE /volumes/{volumeID}":            {path: func(i ids) string { return "/volumes/" + i.volume }, want: nf},
		"GET /volumecontent/{volumeID}/dir":     {path: content("/dir?path=/"), want: nf},
		"POST /volumecontent/{volumeID}/dir":    {path: content("/dir?path=/evil"), want: nf},
		"GET /volumecontent/{volumeID}/path":    {path: content("/path?path=/mark"), want: nf},
		"PATCH /volumecontent/{volumeID}/path":  {path: content("/path?path=/mark"), body: fixed(`{"mode":511}`), want: nf},
		"DELETE /volumecontent/{volumeID}/path": {path: content("/path?path=/mark"), want: nf},
		"GET /volumecontent/{volumeID}/file":    {path: content("/file?path=/mark"), want: nf},
		"PUT /volumecontent/{volumeID}/file":    {path: content("/file?path=/mark"), body: fixed("pwned"), want: nf},
		// Template builds (e2b_tpl_test.go): B records a build of its own, named apart from A's template that the other routes aim at.
		"POST /v3/templates":                                  {path: fixed("/v3/templates"), body: fixed(`{"name":"tenancy-b-own"}`), want: http.StatusAccepted},
		"GET /templates/{templateID}/files/{hash}":            {path: tplPath("/files/" + strings.Repeat("0", 64)), want: nf},
		"PUT /templates/{templateID}/files/{hash}":            {path: tplPath("/files/" + strings.Repeat("0", 64)), body: fixed("x"), want: http.StatusForbidden},
		"POST /v2/templates/{templateID}/builds/{buildID}":    {path: func(i ids) string { return "/v2/templates/" + i.template + "/builds/" + i.templateID }, body: fixed(`{"fromTemplate":"minimal"}`), want: nf},
		"GET /templates/{templateID}/builds/{buildID}/status": {path: func(i ids) string { return "/templates/" + i.template + "/builds/" + i.templateID + "/status" }, want: nf},
		"GET /templates/{templateID}/builds/{buildID}/logs":   {path: func(i ids) string { return "/templates/" + i.template + "/builds/" + i.templateID + "/logs" }, want: nf},
		"GET /templates/{templateID}/{sub}":                   {path: tplPath("/tags"), want: nf},
		"POST /templates/tags":                                {path: fixed("/templates/tags"), body: func(i ids) string { return `{"target":"` + i.template + `:default","tags":["x"]}` }, want: nf},
		"DELETE /templates/tags":                              {path: fixed("/templates/tags"), body: func(i ids) string { return `{"name":"` + i.template + `","tags":["default"]}` }, want: nf},
	}
}

// tplPath is an E2B template route of project A's template.
func tplPath(suffix string) func(ids) string {
	return func(i ids) string { return "/templates/" + i.template + suffix }
}

// content is a path of E2B's volume content routes.
func content(suffix string) func(ids) string {
	return func(i ids) string { return "/volumecontent/" + i.volume + suffix }
}

// walkRoutes sends every route to base with key, aimed at target's objects
// and at missing ones: the answer must be want, the same for both (no
// word of A's objects), and a list must not show them.
func walkRoutes(t *testing.T, base, key string, routes []string, cases map[string]routeCase, target, missing ids) {
	t.Helper()
	for _, route := range routes {
		c, ok := cases[route]
		if !ok || c.path == nil {
			t.Errorf("route %s is not in the cross-project table: say what a key of another project gets from it", route)
			continue
		}
		method, _, _ := strings.Cut(route, " ")
		body := func(i ids) string {
			if c.body == nil {
				return ""
			}
			return c.body(i)
		}
		got := raw(t, base, key, method, c.path(target), body(target))
		if got.status != c.want {
			t.Errorf("%s on project A's objects with a project B key: status %d, want %d: %s", route, got.status, c.want, got.body)
			continue
		}
		if c.absent != nil {
			for _, s := range c.absent(target) {
				if bytes.Contains(got.body, []byte(s)) {
					t.Errorf("%s with a project B key shows project A's %s: %s", route, s, got.body)
				}
			}
		}
		if c.want < 400 {
			continue
		}
		other := raw(t, base, key, method, c.path(missing), body(missing))
		if other.status != got.status || target.replaceIn(got.message()) != missing.replaceIn(other.message()) {
			t.Errorf("%s: project A's object answers %d %q, a missing one %d %q: they must not differ",
				route, got.status, got.message(), other.status, other.message())
		}
	}
}

// projectAState is what must not change when project B tries everything.
type projectAState struct {
	sandbox   apiv1.Sandbox
	mark      string
	snapshots []string
	session   string
	template  apiv1.Template
	secrets   []string
}

func readState(t *testing.T, a *client.Client, sandboxID, sessionID, tplName, project string) projectAState {
	t.Helper()
	ctx := testContext(t)
	var st projectAState
	sb, err := a.GetSandbox(ctx, sandboxID)
	if err != nil {
		t.Fatalf("project A's own key cannot read its sandbox: %v", err)
	}
	st.sandbox = *sb
	rc, err := a.ReadFile(ctx, sandboxID, "/tmp/mark")
	if err != nil {
		t.Fatalf("read A's file: %v", err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	st.mark = string(data)
	snaps, err := a.ListSnapshots(ctx, sandboxID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		st.snapshots = append(st.snapshots, s.ID)
	}
	sess, err := a.GetSession(ctx, sandboxID, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	st.session = sess.State
	tpl, err := a.GetTemplate(ctx, tplName)
	if err != nil {
		t.Fatalf("project A's template: %v", err)
	}
	tpl.Sandboxes, tpl.Logs = 0, nil
	st.template = *tpl
	resp := raw(t, env.srv.URL, env.srv.AdminKey, "GET", "/v1/secrets?project="+project, "")
	var list apiv1.SecretList
	_ = json.Unmarshal(resp.body, &list)
	for _, s := range list.Secrets {
		st.secrets = append(st.secrets, s.Project+"/"+s.Name)
	}
	return st
}

func (s projectAState) String() string {
	b, _ := json.Marshal(struct {
		State, Expires, Mark, Session, Template, TemplateState string
		Network                                                any
		Snapshots, Secrets                                     []string
	}{s.sandbox.State, s.sandbox.ExpiresAt.String(), s.mark, s.session, s.template.ID, s.template.State, s.sandbox.Network, s.snapshots, s.secrets})
	return string(b)
}

const tenantRecipe = "from: minimal\nenv:\n  TENANT_RECIPE: \"1\"\n"

func TestProjectsCannotReachEachOther(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	a, b := newTenant(t, "ten-a"), newTenant(t, "ten-b")
	a1, a2 := a.clients[0], a.clients[1]

	// Project A: a sandbox with a file, a snapshot, a running session, a
	// template and a secret.
	sb, err := a1.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", Network: &apiv1.NetworkPolicy{AllowPublicTraffic: new(bool)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), sb.ID) })
	if sb.Project != a.project {
		t.Fatalf("sandbox of a project A key belongs to %q", sb.Project)
	}
	if _, err := a1.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.WriteFile(ctx, sb.ID, "/tmp/mark", strings.NewReader("project A")); err != nil {
		t.Fatal(err)
	}
	snap, err := a1.CreateSnapshot(ctx, sb.ID, "snap-a")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := a1.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{Cmd: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := a1.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: "tenant-tpl", Recipe: tenantRecipe})
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Project != a.project || tpl.Builtin {
		t.Fatalf("template built by project A: %+v", tpl)
	}
	// An admin names another project's template so. Its id is the ready
	// template's (a cluster's catalog knows none before a node built it).
	tpl = waitTemplate(t, a.project+"/tenant-tpl")
	secretName := "TENANT_A_SECRET"
	if r := raw(t, env.srv.URL, env.srv.AdminKey, "POST", "/v1/secrets", `{"name":"`+secretName+`","value":"a-only","project":"`+a.project+`"}`); r.status != http.StatusCreated {
		t.Fatalf("admin sets project A's secret: %d %s", r.status, r.body)
	}
	t.Cleanup(func() {
		raw(t, env.srv.URL, env.srv.AdminKey, "DELETE", "/v1/secrets/"+secretName+"?project="+a.project, "")
	})

	avol, err := a1.CreateVolume(ctx, apiv1.CreateVolumeRequest{Name: "tenant-vol", SizeMB: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DeleteVolume(context.Background(), avol.ID) })
	if _, err := a1.WriteVolumeFile(ctx, avol.ID, "/mark", strings.NewReader("project A")); err != nil {
		t.Fatal(err)
	}

	target := ids{sandbox: sb.ID, snapshot: "snap-a", snapshotID: snap.ID, session: sess.ID, template: "tenant-tpl", templateID: tpl.ID,
		key: a.keys[0].ID, secret: secretName, project: a.project, volume: avol.ID, volumeName: avol.Name}
	missing := ids{sandbox: "zz0missing0sandbox00", snapshot: "snap-a", snapshotID: "zz0missing0snapshot0", session: "zz0missing0session00",
		template: "tenant-tpl-missing", templateID: strings.Repeat("0", len(tpl.ID)), key: "key_000000000000", secret: "TENANT_NO_SECRET", project: "ten-missing",
		volume: "vol-" + strings.Repeat("0", len(avol.ID)-4), volumeName: "tenant-vol-missing"}
	before := readState(t, a1, sb.ID, sess.ID, "tenant-tpl", a.project)

	for i, key := range b.secretKeys {
		t.Run(fmt.Sprintf("native API, project B key %d", i), func(t *testing.T) {
			walkRoutes(t, env.srv.URL, key, api.Routes, nativeRouteCases(), target, missing)
		})
		t.Run(fmt.Sprintf("E2B API, project B key %d", i), func(t *testing.T) {
			walkRoutes(t, env.srv.E2BURL(), key, e2b.Routes, e2bRouteCases(), target, missing)
		})
	}

	t.Run("proxy", func(t *testing.T) {
		h := http.Header{}
		h.Set("E2b-Sandbox-Id", sb.ID)
		h.Set("E2b-Sandbox-Port", "49983")
		h.Set("X-Access-Token", b.secretKeys[0]) // all project B has
		if resp := proxyRequest(t, http.MethodGet, "/files?path=/tmp/mark", "", nil, h); resp.status != http.StatusUnauthorized || bytes.Contains(resp.body, []byte("project A")) {
			t.Errorf("envd of project A's sandbox with project B's key as token: %d %s, want 401", resp.status, resp.body)
		}
		h.Set("E2b-Sandbox-Port", "8080")
		h.Del("X-Access-Token")
		if resp := proxyRequest(t, http.MethodGet, "/", "", nil, h); resp.status != http.StatusForbidden {
			t.Errorf("private port of project A's sandbox without its traffic token: %d %s, want 403", resp.status, resp.body)
		}
	})

	t.Run("project B's own requests naming project A's objects", func(t *testing.T) {
		own := newSandboxAs(t, b.clients[0], apiv1.CreateSandboxRequest{})
		key := b.secretKeys[0]
		same := func(what string, got, want rawResponse) {
			t.Helper()
			if got.status != http.StatusNotFound || got.status != want.status || target.replaceIn(got.message()) != missing.replaceIn(want.message()) {
				t.Errorf("%s: A's answers %d %q, a missing one's %d %q; want the same 404", what, got.status, got.message(), want.status, want.message())
			}
		}
		for _, ref := range []func(ids) string{
			func(i ids) string { return i.snapshotID },
			func(i ids) string { return i.sandbox + "/" + i.snapshot },
		} {
			same("restore B's sandbox to A's snapshot "+ref(target),
				raw(t, env.srv.URL, key, "POST", "/v1/sandboxes/"+own.ID+"/restore", `{"snapshot":"`+ref(target)+`"}`),
				raw(t, env.srv.URL, key, "POST", "/v1/sandboxes/"+own.ID+"/restore", `{"snapshot":"`+ref(missing)+`"}`))
			same("create from A's snapshot "+ref(target),
				raw(t, env.srv.URL, key, "POST", "/v1/sandboxes", `{"snapshot":"`+ref(target)+`"}`),
				raw(t, env.srv.URL, key, "POST", "/v1/sandboxes", `{"snapshot":"`+ref(missing)+`"}`))
		}
		for _, ref := range []func(ids) string{
			func(i ids) string { return i.volume },
			func(i ids) string { return i.volumeName },
		} {
			same("create mounting A's volume "+ref(target),
				raw(t, env.srv.URL, key, "POST", "/v1/sandboxes", `{"volume_mounts":[{"volume":"`+ref(target)+`","path":"/mnt/a"}]}`),
				raw(t, env.srv.URL, key, "POST", "/v1/sandboxes", `{"volume_mounts":[{"volume":"`+ref(missing)+`","path":"/mnt/a"}]}`))
			same("E2B create mounting A's volume "+ref(target),
				raw(t, env.srv.E2BURL(), key, "POST", "/v2/sandboxes", `{"templateID":"minimal","volumeMounts":[{"name":"`+ref(target)+`","path":"/mnt/a"}]}`),
				raw(t, env.srv.E2BURL(), key, "POST", "/v2/sandboxes", `{"templateID":"minimal","volumeMounts":[{"name":"`+ref(missing)+`","path":"/mnt/a"}]}`))
		}
		same("A's template by id",
			raw(t, env.srv.URL, key, "GET", "/v1/templates/"+target.templateID, ""),
			raw(t, env.srv.URL, key, "GET", "/v1/templates/"+missing.templateID, ""))
		same("create from A's template by id",
			raw(t, env.srv.URL, key, "POST", "/v1/sandboxes", `{"template":"`+target.templateID+`"}`),
			raw(t, env.srv.URL, key, "POST", "/v1/sandboxes", `{"template":"`+missing.templateID+`"}`))
		same("create from A's template by its admin name",
			raw(t, env.srv.URL, key, "POST", "/v1/sandboxes", `{"template":"`+a.project+`/tenant-tpl"}`),
			raw(t, env.srv.URL, key, "POST", "/v1/sandboxes", `{"template":"`+missing.project+`/tenant-tpl-missing"}`))
		if got, err := b.clients[0].GetSandbox(ctx, own.ID); err != nil || got.State != apiv1.StateRunning || got.Snapshot != "" {
			t.Fatalf("project B's own sandbox after the refused restores: %+v, %v", got, err)
		}
	})

	if rc, err := a1.ReadVolumeFile(ctx, avol.ID, "/mark"); err != nil {
		t.Fatalf("project A's volume after project B's attempts: %v", err)
	} else if data, _ := io.ReadAll(rc); string(data) != "project A" {
		rc.Close()
		t.Fatalf("project A's volume file after project B's attempts: %q", data)
	} else {
		rc.Close()
	}
	after := readState(t, a1, sb.ID, sess.ID, "tenant-tpl", a.project)
	if before.String() != after.String() || after.sandbox.State != apiv1.StateRunning || after.mark != "project A" || after.session != apiv1.SessionRunning {
		t.Fatalf("project B's attempts changed project A:\nbefore %s\nafter  %s", before, after)
	}

	t.Run("same project's second key sees everything", func(t *testing.T) {
		got, err := a2.GetSandbox(ctx, sb.ID)
		if err != nil || got.AccessToken == "" || got.TrafficAccessToken == "" {
			t.Fatalf("second key of project A: %+v, %v; want the sandbox with its tokens", got, err)
		}
		list, err := a2.ListSandboxes(ctx, client.ListOptions{})
		if err != nil || !hasSandbox(list, sb.ID) {
			t.Fatalf("second key's list misses the sandbox: %v", err)
		}
		if out := execAs(t, a2, sb.ID, "cat /tmp/mark"); out != "project A" {
			t.Fatalf("second key reads %q", out)
		}
		if snaps, err := a2.ListSnapshots(ctx, sb.ID); err != nil || len(snaps) != 1 {
			t.Fatalf("second key's snapshots: %v, %v", snaps, err)
		}
		if got, err := a2.GetTemplate(ctx, "tenant-tpl"); err != nil || got.ID != tpl.ID {
			t.Fatalf("second key's template: %+v, %v", got, err)
		}
		// Built-in templates are shared, read-only.
		if _, err := a2.GetTemplate(ctx, "minimal"); err != nil {
			t.Fatalf("built-in template invisible to a project: %v", err)
		}
		if err := a2.DeleteTemplate(ctx, "minimal"); !isStatus(err, http.StatusForbidden) {
			t.Fatalf("project key deletes the built-in template: %v, want 403", err)
		}
		if _, err := a2.SetTemplatePool(ctx, "minimal", 1); !isStatus(err, http.StatusForbidden) {
			t.Fatalf("project key sets the built-in template's pool: %v, want 403", err)
		}
	})

	t.Run("admin sees every project and filters by project", func(t *testing.T) {
		all, err := env.client.ListSandboxes(ctx, client.ListOptions{})
		if err != nil || !hasSandbox(all, sb.ID) {
			t.Fatalf("admin list misses project A's sandbox: %v", err)
		}
		got, err := env.client.GetSandbox(ctx, sb.ID)
		if err != nil || got.AccessToken == "" || got.Project != a.project {
			t.Fatalf("admin get: %+v, %v", got, err)
		}
		var onlyB apiv1.SandboxList
		r := raw(t, env.srv.URL, env.srv.AdminKey, "GET", "/v1/sandboxes?project="+b.project, "")
		if err := json.Unmarshal(r.body, &onlyB); r.status != 200 || err != nil || hasSandbox(onlyB.Sandboxes, sb.ID) {
			t.Fatalf("admin ?project=%s: %d %s", b.project, r.status, r.body)
		}
		var onlyA apiv1.SandboxList
		r = raw(t, env.srv.URL, env.srv.AdminKey, "GET", "/v1/sandboxes?project="+a.project, "")
		if err := json.Unmarshal(r.body, &onlyA); err != nil || len(onlyA.Sandboxes) != 1 || onlyA.Sandboxes[0].ID != sb.ID {
			t.Fatalf("admin ?project=%s: %s", a.project, r.body)
		}
		var keys apiv1.KeyList
		r = raw(t, env.srv.URL, env.srv.AdminKey, "GET", "/v1/keys?project="+a.project, "")
		if err := json.Unmarshal(r.body, &keys); err != nil || len(keys.Keys) != 2 {
			t.Fatalf("admin keys of project A: %s", r.body)
		}
		var tpls apiv1.TemplateList
		r = raw(t, env.srv.URL, env.srv.AdminKey, "GET", "/v1/templates?project="+b.project, "")
		if err := json.Unmarshal(r.body, &tpls); err != nil || bytes.Contains(r.body, []byte(`"project":"`+a.project)) {
			t.Fatalf("admin templates of project B show A's: %s", r.body)
		}
		if r := raw(t, env.srv.URL, a.secretKeys[0], "GET", "/v1/sandboxes?project="+b.project, ""); r.status != http.StatusForbidden {
			t.Fatalf("project key filters by another project: %d %s", r.status, r.body)
		}
		// The admin's own sandboxes cannot name project A's secrets.
		r = raw(t, env.srv.URL, env.srv.AdminKey, "POST", "/v1/sandboxes", `{"template":"minimal","credentials":[{"host":"api.example.com","env":"TOKEN","secret":"`+secretName+`"}]}`)
		if r.status != http.StatusBadRequest || !strings.Contains(r.message(), "no secret named "+secretName) {
			t.Fatalf("a default-project sandbox with project A's secret: %d %s, want 400", r.status, r.body)
		}
	})

	t.Run("one recipe built by two projects", func(t *testing.T) {
		b1 := b.clients[0]
		bt, err := b1.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: "tenant-tpl", Recipe: tenantRecipe})
		if err != nil {
			t.Fatal(err)
		}
		if bt.ID != tpl.ID || bt.Project != b.project {
			t.Fatalf("project B's build of the same recipe: %+v (A's id %s)", bt, tpl.ID)
		}
		waitTemplate(t, b.project+"/tenant-tpl")
		if err := b1.DeleteTemplate(ctx, "tenant-tpl"); err != nil {
			t.Fatalf("project B deletes its template while A's sandbox... uses the same rootfs: %v", err)
		}
		if _, err := b1.GetTemplate(ctx, "tenant-tpl"); !client.IsNotFound(err) {
			t.Fatalf("project B's template after its delete: %v", err)
		}
		got, err := a1.GetTemplate(ctx, "tenant-tpl")
		if err != nil || got.State != apiv1.TemplateReady {
			t.Fatalf("project A's template after B deleted its own: %+v, %v", got, err)
		}
		other := newSandboxAs(t, a2, apiv1.CreateSandboxRequest{Template: "tenant-tpl"})
		if out := execAs(t, a2, other.ID, "echo $TENANT_RECIPE"); out != "1\n" && out != "1" {
			t.Fatalf("sandbox from A's template after B's delete: env %q", out)
		}
		if other.Template != "tenant-tpl" {
			t.Fatalf("sandbox template shown as %q", other.Template)
		}
	})
}

func hasSandbox(list []apiv1.Sandbox, id string) bool {
	for _, s := range list {
		if s.ID == id {
			return true
		}
	}
	return false
}

func isStatus(err error, status int) bool {
	var apiErr *client.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode == status
}

func execAs(t *testing.T, c *client.Client, id, script string) string {
	t.Helper()
	res, err := c.Exec(testContext(t), id, apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q: %+v, %v", script, res, err)
	}
	return res.Stdout
}

// newSandboxAs creates a running sandbox with c, deleted when the test ends.
func newSandboxAs(t *testing.T, c *client.Client, req apiv1.CreateSandboxRequest) *apiv1.Sandbox {
	t.Helper()
	ctx := testContext(t)
	if req.Template == "" {
		req.Template = "minimal"
	}
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), sb.ID) })
	running, err := c.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute)
	if err != nil {
		t.Fatalf("wait for sandbox %s: %v", sb.ID, err)
	}
	return running
}

func TestProjectQuotasAnswer429(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	p := newTenant(t, "ten-quota")
	c := p.clients[0]
	one, zero := 1, 0
	set := func(s apiv1.QuotaSettings) {
		t.Helper()
		if _, err := env.client.SetProjectQuota(ctx, p.project, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = env.client.SetProjectQuota(context.Background(), p.project, apiv1.QuotaSettings{}) })
	set(apiv1.QuotaSettings{MaxSandboxes: &one, MaxSnapshots: &one})
	sb := newSandboxAs(t, c, apiv1.CreateSandboxRequest{})
	create := func(body string) rawResponse {
		return raw(t, env.srv.URL, p.secretKeys[0], "POST", "/v1/sandboxes", body)
	}
	if r := create(`{"template":"minimal"}`); r.status != http.StatusTooManyRequests || !strings.Contains(r.message(), "quota") {
		t.Fatalf("second sandbox past max_sandboxes 1: %d %s, want 429", r.status, r.body)
	}
	if _, err := c.Branch(ctx, sb.ID, 1); !isStatus(err, http.StatusTooManyRequests) {
		t.Fatalf("branch past max_sandboxes 1: %v, want 429", err)
	}
	// Another project is not held back by this one's quota.
	other := newTenant(t, "ten-free")
	newSandboxAs(t, other.clients[0], apiv1.CreateSandboxRequest{})

	if _, err := c.CreateSnapshot(ctx, sb.ID, "first"); err != nil {
		t.Fatal(err)
	}
	r := raw(t, env.srv.URL, p.secretKeys[0], "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", `{"name":"second"}`)
	if r.status != http.StatusTooManyRequests || !strings.Contains(r.message(), "snapshots") {
		t.Fatalf("snapshot past max_snapshots 1: %d %s, want 429", r.status, r.body)
	}

	var proj apiv1.Project
	r = raw(t, env.srv.URL, env.srv.AdminKey, "GET", "/v1/projects/"+p.project, "")
	if err := json.Unmarshal(r.body, &proj); err != nil || proj.Usage.Sandboxes != 1 || proj.Usage.Snapshots != 1 || proj.Usage.Keys != 2 || proj.Quota.MaxSandboxes != 1 {
		t.Fatalf("project view: %s", r.body)
	}

	mem := sb.MemoryMB + 32
	set(apiv1.QuotaSettings{MaxMemoryMB: &mem})
	if r := create(`{"template":"minimal","memory_mb":64}`); r.status != http.StatusTooManyRequests || !strings.Contains(r.message(), "MiB") {
		t.Fatalf("sandbox past max_memory_mb: %d %s, want 429", r.status, r.body)
	}

	rate := 0.05 // a burst of one create, then one every 20 s
	set(apiv1.QuotaSettings{CreatesPerSecond: &rate, MaxSandboxes: &zero})
	first := create(`{"template":"minimal","memory_mb":32}`)
	if first.status != http.StatusAccepted {
		t.Fatalf("first create under the rate: %d %s", first.status, first.body)
	}
	var created apiv1.Sandbox
	if json.Unmarshal(first.body, &created) == nil && created.ID != "" {
		t.Cleanup(func() { _ = env.client.DeleteSandbox(context.Background(), created.ID) })
	}
	r = create(`{"template":"minimal","memory_mb":32}`)
	retry, _ := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != http.StatusTooManyRequests || retry < 1 || retry > 20 || !strings.Contains(r.message(), "creates a second") {
		t.Fatalf("create past creates_per_second: %d Retry-After %q %s, want 429 with Retry-After 1-20", r.status, r.header.Get("Retry-After"), r.body)
	}
	e := raw(t, env.srv.E2BURL(), p.secretKeys[0], "POST", "/sandboxes", `{"templateID":"minimal","timeout":60}`)
	if e.status != http.StatusTooManyRequests || e.header.Get("Retry-After") == "" {
		t.Fatalf("E2B create past the rate: %d %s", e.status, e.body)
	}
	if r := raw(t, env.srv.URL, env.srv.AdminKey, "PUT", "/v1/projects/"+p.project, `{"max_sandboxes":-1}`); r.status != http.StatusBadRequest {
		t.Fatalf("negative quota: %d %s", r.status, r.body)
	}
}

func TestRevokedKeysAttachStreamEnds(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	p := newTenant(t, "ten-revoke")
	c := p.clients[0]
	sb := newSandboxAs(t, c, apiv1.CreateSandboxRequest{})
	sess, err := c.CreateSession(ctx, sb.ID, apiv1.CreateSessionRequest{Cmd: []string{"/bin/sh", "-c", "while :; do echo tick; sleep 1; done"}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.Attach(ctx, sb.ID, sess.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if _, err := stream.Next(); err != nil {
		t.Fatalf("first event: %v", err)
	}
	if err := env.client.RevokeKey(ctx, p.keys[0].ID); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			ev, err := stream.Next()
			if err != nil {
				ended <- err
				return
			}
			if ev.Type == apiv1.EventExit {
				ended <- fmt.Errorf("the session exited")
				return
			}
		}
	}()
	select {
	case err := <-ended:
		t.Logf("stream ended after the revoke: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the attach stream of a revoked key still runs 10 s after the revoke")
	}
	if _, err := c.GetSandbox(ctx, sb.ID); !isStatus(err, http.StatusUnauthorized) {
		t.Fatalf("revoked key: %v, want 401", err)
	}
	// The session itself runs on: the key is gone, not the sandbox.
	if s, err := p.clients[1].GetSession(ctx, sb.ID, sess.ID); err != nil || s.State != apiv1.SessionRunning {
		t.Fatalf("session after its attacher's key was revoked: %+v, %v", s, err)
	}
}

func TestPerKeyRequestLimit(t *testing.T) {
	requireServer(t)
	p := newTenant(t, "ten-conns")
	sb := newSandboxAs(t, p.clients[0], apiv1.CreateSandboxRequest{})
	ctx, cancel := context.WithCancel(testContext(t))
	var held sync.WaitGroup
	started := make(chan struct{}, api.DefaultMaxRequestsPerKey)
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for i := 0; i < api.DefaultMaxRequestsPerKey; i++ {
		held.Add(1)
		go func() {
			defer held.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", env.srv.URL+"/v1/sandboxes/"+sb.ID+"/wait?state=stopped&timeout_s=120", nil)
			req.Header.Set("X-API-Key", p.secretKeys[0])
			started <- struct{}{}
			// The poll below can take the last slot just before this
			// wait arrives; a wait refused that way tries again, or
			// only 255 would be held and the poll would never see 429.
			for ctx.Err() == nil {
				resp, err := hc.Do(req)
				if err != nil {
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	for i := 0; i < api.DefaultMaxRequestsPerKey; i++ {
		<-started
	}
	// The waits are in flight once the server counts them; poll.
	var r rawResponse
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r = raw(t, env.srv.URL, p.secretKeys[0], "GET", "/v1/sandboxes/"+sb.ID, ""); r.status == http.StatusTooManyRequests {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("request past %d in flight: %d %s, want 429", api.DefaultMaxRequestsPerKey, r.status, r.body)
	}
	// Another key of the same project is not affected.
	if r := raw(t, env.srv.URL, p.secretKeys[1], "GET", "/v1/sandboxes/"+sb.ID, ""); r.status != http.StatusOK {
		t.Fatalf("the project's other key: %d %s", r.status, r.body)
	}
	cancel()
	held.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if r = raw(t, env.srv.URL, p.secretKeys[0], "GET", "/v1/sandboxes/"+sb.ID, ""); r.status == http.StatusOK {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("key still refused after its requests ended: %d %s", r.status, r.body)
}

func TestLastAdminKeyAndReset(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	keys, err := env.client.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var admins []apiv1.APIKey
	for _, k := range keys {
		if k.Admin {
			admins = append(admins, k)
		}
	}
	if len(admins) != 1 {
		// Revoking "the last" one would then revoke the harness's key.
		t.Fatalf("want exactly the harness's admin key, found %d admin keys", len(admins))
	}
	r := raw(t, env.srv.URL, env.srv.AdminKey, "DELETE", "/v1/keys/"+admins[0].ID, "")
	if r.status != http.StatusConflict || !strings.Contains(r.message(), "last admin key") {
		t.Fatalf("revoking the last admin key: %d %s, want 409", r.status, r.body)
	}
	if _, err := env.client.ListKeys(ctx); err != nil {
		t.Fatalf("the admin key stopped working after the refused revoke: %v", err)
	}
	second, err := env.client.CreateKey(ctx, apiv1.CreateKeyRequest{Name: "second-admin", Admin: true})
	if err != nil || !second.Admin {
		t.Fatalf("create a second admin key: %+v, %v", second, err)
	}
	if err := env.client.RevokeKey(ctx, second.ID); err != nil {
		t.Fatalf("revoking one of two admin keys: %v", err)
	}

	// --reset-admin-key works on a stopped server's data dir and refuses
	// the running one's.
	space := filepath.Join(env.binDir, "space")
	out, err := exec.Command(space, "serve", "--reset-admin-key", "--data-dir", env.dataDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "stop the running server") {
		t.Fatalf("reset on a running server's data dir: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if err := copyFile(filepath.Join(env.dataDir, "state.db"), filepath.Join(dir, "state.db")); err != nil {
		t.Skipf("cannot copy state.db of the running server: %v", err)
	}
	cmd := exec.Command(space, "serve", "--reset-admin-key", "--data-dir", dir)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Run(); err != nil {
		t.Fatalf("reset-admin-key: %v", err)
	}
	key := strings.TrimSpace(stdout.String())
	file, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil || strings.TrimSpace(string(file)) != key || !strings.HasPrefix(key, "e2b_") {
		t.Fatalf("admin.key %q, printed %q, %v", file, key, err)
	}
	if info, _ := os.Stat(filepath.Join(dir, "admin.key")); info.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key mode %v, want 0600", info.Mode().Perm())
	}
}

// copyFile copies a bbolt file that another process holds open: bbolt
// writes whole pages, and the copy is only read as a fresh store.
func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}

// Through the proxy, knowing a suspended sandbox's id is not enough to wake
// it: only a request carrying its access token resumes it, on envd's port
// and on a public sandbox's other ports alike.
func TestProxyDoesNotResumeForStrangers(t *testing.T) {
	requireServer(t)
	ctx := testContext(t)
	a, b := newTenant(t, "ten-sleep"), newTenant(t, "ten-poke")
	sb := newSandboxAs(t, a.clients[0], apiv1.CreateSandboxRequest{})
	if _, err := a.clients[0].Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", sb.ID)
	h.Set("E2b-Sandbox-Port", "49983")
	for _, token := range []string{"", b.secretKeys[0], strings.Repeat("0", len(sb.AccessToken))} {
		h.Set("X-Access-Token", token)
		if resp := proxyRequest(t, http.MethodGet, "/health", "", nil, h); resp.status != http.StatusUnauthorized {
			t.Fatalf("envd of a suspended sandbox with token %q: %d %s, want 401", token, resp.status, resp.body)
		}
	}
	// A made-up signature of a /files URL is no token either.
	h.Del("X-Access-Token")
	if resp := proxyRequest(t, http.MethodGet, "/files?path=/etc/hostname&signature=v1_forged", "", nil, h); resp.status != http.StatusUnauthorized {
		t.Fatalf("envd of a suspended sandbox with a forged signature: %d %s, want 401", resp.status, resp.body)
	}
	// The sandbox is public: its ports take requests without credentials
	// while it runs, but none of them wakes it without its access token.
	h.Set("E2b-Sandbox-Port", "8080")
	for _, token := range []string{"", b.secretKeys[0]} {
		h.Set("X-Access-Token", token)
		if resp := proxyRequest(t, http.MethodGet, "/", "", nil, h); resp.status != http.StatusUnauthorized {
			t.Fatalf("port 8080 of a suspended public sandbox with token %q: %d %s, want 401", token, resp.status, resp.body)
		}
	}
	h.Del("X-Access-Token")
	h.Set("E2b-Sandbox-Port", "49983")
	if got, err := a.clients[0].GetSandbox(ctx, sb.ID); err != nil || got.State != apiv1.StateSuspended {
		t.Fatalf("after requests without its token: %+v, %v; want still suspended", got, err)
	}
	h.Set("X-Access-Token", sb.AccessToken)
	if resp := proxyRequest(t, http.MethodGet, "/health", "", nil, h); resp.status >= 300 {
		t.Fatalf("envd with the sandbox's own token: %d %s", resp.status, resp.body)
	}
	if got, err := a.clients[0].GetSandbox(ctx, sb.ID); err != nil || got.State != apiv1.StateRunning {
		t.Fatalf("after a request with its token: %+v, %v; want running", got, err)
	}
}
