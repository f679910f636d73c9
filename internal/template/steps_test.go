package template

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The ID of a recipe with copy steps hashes the archives' content: two
// projects naming different files by one hash get different templates.
func TestStepsIDHashesArchiveContent(t *testing.T) {
	e := newTestEnv(t)
	hash := strings.Repeat("ab", 32)
	r := mustParse(t, "from: minimal\nsteps:\n  - copy: {archive: "+hash+", src: a.txt, dest: /a.txt}\n  - run: echo hi\n    user: user\n    workdir: /srv\n")
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	os.WriteFile(one, []byte("one"), 0o600)
	os.WriteFile(two, []byte("two"), 0o600)
	p1, err := e.m.plan("x", r, Source{Archives: map[string]string{hash: one}})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := e.m.plan("x", r, Source{Archives: map[string]string{hash: two}})
	if err != nil {
		t.Fatal(err)
	}
	if p1.id == p2.id {
		t.Error("archives of different content under one name give one template ID")
	}
	if _, err := e.m.plan("x", r, Source{}); err == nil || !strings.Contains(err.Error(), "no uploaded files") {
		t.Errorf("copy without its archive: %v", err)
	}

	// The build streams the archive into the sandbox and unpacks it there;
	// the run step switches to its user in its directory.
	tpl, err := e.m.Build(context.Background(), "x", r, Source{Archives: map[string]string{hash: one}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.boxes.writes["/tmp/.space-copy-0.tar"] != "one" {
		t.Errorf("archive not sent to the sandbox: %v", e.boxes.writes)
	}
	scripts := e.boxes.scripts()
	for _, want := range []string{"tar -xf '/tmp/.space-copy-0.tar' -C '/tmp/.space-copy-0/unpack'", "mkdir -p '/srv'\ncd '/srv'", `exec su -p -s /bin/sh "$u" -c 'echo hi'`} {
		if !strings.Contains(scripts, want) {
			t.Errorf("scripts lack %q:\n%s", want, scripts)
		}
	}
	if tpl.User != "user" || tpl.Workdir != "/home/user" {
		t.Errorf("defaults of minimal changed: %q %q", tpl.User, tpl.Workdir)
	}
	if _, err := os.Stat(one); err != nil {
		t.Errorf("the caller's archive was removed: %v", err)
	}
}

func TestStepValidation(t *testing.T) {
	h := strings.Repeat("0", 64)
	for _, bad := range []string{
		"steps: [{}]",
		"steps: [{run: x, copy: {archive: " + h + ", src: a, dest: /b}}]",
		"steps: [{copy: {archive: nothex, src: a, dest: /b}}]",
		"steps: [{copy: {archive: " + h + ", src: ../a, dest: /b}}]",
		"steps: [{copy: {archive: " + h + ", src: /a, dest: /b}}]",
		"steps: [{copy: {archive: " + h + ", src: a}}]",
		"steps: [{copy: {archive: " + h + ", src: a, dest: /b, mode: '999'}}]",
		"steps: [{run: x, workdir: relative}]",
		"steps: [{run: x, user: 'a b'}]",
		"steps: [{run: x, env: {'1x': y}}]",
	} {
		if _, err := ParseRecipe([]byte("from: minimal\n" + bad + "\n")); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	if got := staticPrefix("dir/*.txt"); got != "dir" {
		t.Errorf("staticPrefix(dir/*.txt) = %q", got)
	}
	if got := staticPrefix("**/x"); got != "." {
		t.Errorf("staticPrefix(**/x) = %q", got)
	}
}
