package template

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

const (
	testCA      = "-----BEGIN CERTIFICATE-----\nc3BhY2UgdGVzdCBDQSBvbmU=\n-----END CERTIFICATE-----\n"
	otherTestCA = "-----BEGIN CERTIFICATE-----\nc3BhY2UgdGVzdCBDQSB0d28=\n-----END CERTIFICATE-----\n"
)

func TestInstallCAIsIdempotent(t *testing.T) {
	rootfs := t.TempDir()
	if err := installCA(rootfs, []byte(testCA)); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(rootfs, caBundle)
	if got, _ := os.ReadFile(bundle); string(got) != testCA {
		t.Fatalf("new bundle = %q", got)
	}
	// A rootfs with a bundle of its own keeps it and gains the CA once.
	if err := os.WriteFile(bundle, []byte("-----BEGIN CERTIFICATE-----\nc3lzdGVt\n-----END CERTIFICATE-----"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := installCA(rootfs, []byte(testCA)); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(bundle)
	if bytes.Count(got, []byte("BEGIN CERTIFICATE")) != 2 || !bytes.Contains(got, []byte("c3lzdGVt\n-----END CERTIFICATE-----\n"+testCA)) {
		t.Fatalf("bundle after two installs:\n%s", got)
	}
	if own, _ := os.ReadFile(filepath.Join(rootfs, caCertPath)); string(own) != testCA {
		t.Fatalf("%s = %q", caCertPath, own)
	}
}

// The CA is part of the template's identity, is in the built rootfs's
// trust store, and the template's env points clients at it.
func TestTemplatesTrustTheCA(t *testing.T) {
	e := newTestEnv(t)
	recipe := mustParse(t, "from: minimal\n")
	id := func() string {
		t.Helper()
		p, err := e.m.plan("m", recipe, Source{})
		if err != nil {
			t.Fatal(err)
		}
		return p.id
	}
	without := id()
	e.m.cfg.TrustedCA = []byte(otherTestCA)
	other := id()
	e.m.cfg.TrustedCA = []byte(testCA)
	with := id()
	if without == with || other == with {
		t.Fatalf("the CA does not change the template ID: none %s, other %s, this %s", without, other, with)
	}
	tpl, _ := e.build(t, "m", recipe, "")
	if tpl.ID != with {
		t.Fatalf("built %s, planned %s", tpl.ID, with)
	}
	// PlannedID tells a template built with another CA from a current one
	// (what a node rebuilds its built-in templates by).
	if got, err := e.m.PlannedID("m", recipe); err != nil || got != tpl.ID {
		t.Fatalf("PlannedID with the CA it was built with = %s, %v; want %s", got, err, tpl.ID)
	}
	e.m.cfg.TrustedCA = []byte(otherTestCA)
	if got, err := e.m.PlannedID("m", recipe); err != nil || got != other {
		t.Fatalf("PlannedID with another CA = %s, %v; want %s", got, err, other)
	}
	e.m.cfg.TrustedCA = []byte(testCA)
	for k, v := range trustEnv {
		if tpl.Env[k] != v {
			t.Errorf("template env %s = %q, want %q", k, tpl.Env[k], v)
		}
	}
	if got, err := os.ReadFile(filepath.Join(e.rootfs(tpl), caBundle)); err != nil || !bytes.Contains(got, []byte(testCA)) {
		t.Fatalf("bundle in the rootfs: %q, %v", got, err)
	}
	child, _ := e.build(t, "child", mustParse(t, "from: template:m\nenv: {SSL_CERT_FILE: /custom.pem}\n"), "")
	got, _ := os.ReadFile(filepath.Join(e.rootfs(child), caBundle))
	if bytes.Count(got, []byte("BEGIN CERTIFICATE")) != 1 {
		t.Errorf("child bundle holds the CA %d times", bytes.Count(got, []byte("BEGIN CERTIFICATE")))
	}
	if child.Env["SSL_CERT_FILE"] != "/custom.pem" {
		t.Errorf("a recipe's own SSL_CERT_FILE was overridden: %q", child.Env["SSL_CERT_FILE"])
	}
}
