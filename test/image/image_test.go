// Package image tests the OCI archive of space that scripts/image.sh
// builds: its manifest and config (both views, every blob's digest), the
// three binaries in its layers, and
// that the unpacked image runs `space --help` (under chroot, as a container
// runtime would run its entrypoint). scripts/test.sh builds the archive
// and names it in $SPACE_IMAGE_ARCHIVE; without that variable the test
// looks for .tools/images/space.oci.tar and is skipped when there is none.
package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/ociarchive"
	"github.com/space-platform/space/internal/template"
	"github.com/space-platform/space/internal/testtier"
)

func archivePath(t *testing.T) string {
	testtier.Full(t, "checks the OCI image scripts/image.sh builds (the quick tier does not build it)")
	if p := os.Getenv("SPACE_IMAGE_ARCHIVE"); p != "" {
		return p // named on purpose: missing is a failure, not a skip
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(wd, "..", "..", ".tools", "images", "space.oci.tar")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no image archive at %s (build it with scripts/image.sh, or set SPACE_IMAGE_ARCHIVE)", p)
	}
	return p
}

// binaries are what the image exists to carry.
var binaries = []string{"usr/local/bin/space", "usr/local/bin/space-agent", "usr/local/bin/runsc"}

// hostTools are what the node and the template builder run; each must be
// on the image's PATH.
var hostTools = []string{"btrfs", "mkfs.btrfs", "nft", "ip", "losetup", "mount", "umount", "nsenter",
	"unshare", "useradd", "debootstrap", "busybox", "tar", "bash", "sleep"}

func TestSpaceImage(t *testing.T) {
	archive := archivePath(t)
	img, err := ociarchive.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Refs) == 0 || len(img.Docker.RepoTags) == 0 {
		t.Errorf("image has no reference: index.json %v, manifest.json %v", img.Refs, img.Docker.RepoTags)
	}
	if !slices.Equal(img.Refs, img.Docker.RepoTags) {
		t.Errorf("index.json names %v, manifest.json %v", img.Refs, img.Docker.RepoTags)
	}
	if got := img.Config.Config.Entrypoint; !slices.Equal(got, []string{"/usr/local/bin/space"}) {
		t.Errorf("entrypoint %q, want /usr/local/bin/space", got)
	}
	if img.Config.OS != "linux" || img.Config.Architecture != "amd64" {
		t.Errorf("platform %s/%s", img.Config.OS, img.Config.Architecture)
	}
	if os.Geteuid() != 0 {
		t.Skip("unpacking the image (its files' owners) and chroot need root")
	}
	// Unpacked the way a template from this archive would be.
	dir := t.TempDir()
	if err := template.UnpackArchive(archive, dir); err != nil {
		t.Fatal(err)
	}
	for _, b := range binaries {
		st, err := os.Lstat(filepath.Join(dir, b))
		switch {
		case err != nil:
			t.Errorf("%s is not in the image: %v", b, err)
		case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 || st.Size() < 1<<20:
			t.Errorf("%s is not an executable binary: mode %v, %d bytes", b, st.Mode(), st.Size())
		}
	}
	if t.Failed() {
		return
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range img.Config.Config.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	// Like a runtime: a fresh /proc (runsc reads it) in mount and PID
	// namespaces of its own, so nothing is left mounted afterwards.
	chroot := func(args ...string) (string, error) {
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--pid", "--fork",
			"--mount-proc=" + filepath.Join(dir, "proc"), "chroot", dir}, args...)...)
		cmd.Env = []string{"PATH=" + path, "HOME=/root"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := chroot(img.Config.Config.Entrypoint[0], "--help")
	if err != nil {
		t.Fatalf("space --help in the image: %v\n%s", err, out)
	}
	for _, want := range []string{"Usage: space COMMAND", "control-plane", "node", "serve"} {
		if !strings.Contains(out, want) {
			t.Errorf("space --help lacks %q:\n%s", want, out)
		}
	}
	// Static binaries: each must start in a root with no Go toolchain and
	// no host libraries behind it.
	if out, err := chroot("/usr/local/bin/runsc", "--version"); err != nil || !strings.Contains(out, "runsc version") {
		t.Errorf("runsc --version in the image: %v\n%s", err, out)
	}
	if out, err := chroot("/bin/sh", "-c", "file=/usr/local/bin/space-agent; test -x $file && head -c4 $file | grep -q ELF"); err != nil {
		t.Errorf("space-agent is not an executable ELF in the image: %v\n%s", err, out)
	}
	for _, tool := range hostTools {
		if out, err := chroot("/bin/sh", "-c", "command -v "+tool); err != nil {
			t.Errorf("%s is not on the image's PATH (%s): %v %s", tool, path, err, out)
		}
	}
}
