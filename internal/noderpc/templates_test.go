package noderpc

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
)

// A build over the wire streams the node's log and returns what the node
// built; a failed build's error and its log so far both come back.
func TestBuildTemplateOverRPC(t *testing.T) {
	f := nodeapitest.NewFake("fake")
	c := dial(t, f)
	ctx := context.Background()
	want, err := f.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "hi", Recipe: []byte("from: minimal")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	got, err := c.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "hi", Recipe: []byte("from: minimal")}, &logs)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.ID != want.Spec.ID || got.Spec.RootfsVolume != want.Spec.RootfsVolume || got.SizeBytes != want.SizeBytes {
		t.Fatalf("built %+v over the wire, the node built %+v", got, want)
	}
	if !strings.Contains(logs.String(), "building hi\n") || !strings.Contains(logs.String(), "ready (id "+want.Spec.ID+")") {
		t.Fatalf("log = %q", logs.String())
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Templates) != 1 || info.Templates[0] != want.Spec.ID {
		t.Fatalf("the node holds templates %v, want [%s]", info.Templates, want.Spec.ID)
	}

	logs.Reset()
	_, err = c.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "bad", Recipe: []byte(nodeapitest.FakeRecipeFails)}, &logs)
	if err == nil || !strings.Contains(err.Error(), "step 1 failed") {
		t.Fatalf("failed build: err = %v", err)
	}
	if logs.String() != "building bad\n" {
		t.Fatalf("failed build's log = %q", logs.String())
	}

	// An archive staged over the wire is what the build that names it
	// builds from; past its limit it is refused.
	handle, err := c.StageTemplateArchive(ctx, strings.NewReader("the archive"), 11)
	if err != nil {
		t.Fatal(err)
	}
	up, err := c.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "up", Recipe: []byte("from: upload"), Archive: handle}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := c.ReadVolumeFile(ctx, up.Spec.RootfsVolume, "/archive")
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := io.ReadAll(body); string(data) != "the archive" {
		t.Fatalf("built from %q", data)
	}
	body.Close()
	if _, err := c.StageTemplateArchive(ctx, strings.NewReader("the archive"), 10); err == nil {
		t.Fatal("an archive over its limit was staged")
	}

	// A copy step's files staged over the wire reach the build by their
	// hash, and the registry credentials reach the node with the request.
	files, err := c.StageTemplateArchive(ctx, strings.NewReader("the files"), 100)
	if err != nil {
		t.Fatal(err)
	}
	hash := strings.Repeat("ab", 32)
	cp, err := c.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "cp", Recipe: []byte("from: base"),
		CopyArchives: map[string]string{hash: files}, RegistryUsername: "u", RegistryPassword: "p", DiskQuotaBytes: 12345}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _, err = c.ReadVolumeFile(ctx, cp.Spec.RootfsVolume, "/files/"+hash)
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := io.ReadAll(body); string(data) != "the files" {
		t.Fatalf("copy files built from %q", data)
	}
	body.Close()
	if got := f.LastTemplateBuild(); got.RegistryUsername != "u" || got.RegistryPassword != "p" {
		t.Fatalf("registry credentials reached the node as %q/%q", got.RegistryUsername, got.RegistryPassword)
	}
	if got := f.LastTemplateBuild().DiskQuotaBytes; got != 12345 {
		t.Fatalf("the project's template disk left reached the node as %d, want 12345", got)
	}
	if _, err := c.BuildTemplate(ctx, nodeapi.TemplateBuildRequest{Name: "cp2", Recipe: []byte("from: base"),
		CopyArchives: map[string]string{hash: files}}, nil); err == nil {
		t.Fatal("a consumed copy archive built again")
	}

	if err := c.DeleteTemplate(ctx, want.Spec.ID); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.VolumeExists(ctx, want.Spec.RootfsVolume); ok {
		t.Fatal("the template's root volume survived its delete")
	}
	if err := c.DeleteTemplate(ctx, "../escape"); err == nil {
		t.Fatal("an invalid template id was accepted")
	}
}
