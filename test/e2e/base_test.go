package e2e

import (
	"strings"
	"testing"

	"github.com/space-platform/space/internal/testtier"
	"github.com/space-platform/space/pkg/apiv1"
)

// The base template follows the conventions E2B SDKs expect: Debian with
// bash, python3, curl, git, sudo; user "user" with home /home/user as the
// default user and working directory.
func TestBaseTemplateConventions(t *testing.T) {
	requireServer(t)
	testtier.Full(t, "builds Debian with debootstrap")
	if err := buildBuiltin("base"); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, apiv1.CreateSandboxRequest{Template: "base"})
	out := execOK(t, sb.ID, `set -e
id -un; pwd; echo "$HOME"
bash -c 'echo bash $BASH_VERSION' | cut -d. -f1
python3 -c 'print("python", 6*7)'
git --version | cut -d' ' -f1-2
curl --version | head -1 | cut -d' ' -f1
sudo -n id -u
test -d /etc/ssl/certs && echo certs
grep -c . /etc/debian_version`)
	want := []string{"user", "/home/user", "/home/user", "bash 5", "python 42", "git version", "curl", "0", "certs", "1"}
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("base template:\n got %q\nwant %q", got, want)
	}
}
