package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

func TestFilesRoundTrip(t *testing.T) {
	sb := newSandbox(t, apiv1.CreateSandboxRequest{})
	ctx := testContext(t)

	big := make([]byte, 20<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	entry, err := env.client.WriteFile(ctx, sb.ID, "/home/user/deep/er/nest/blob.bin", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	if entry.Size != int64(len(big)) || entry.Type != "file" {
		t.Fatalf("write answered %+v", entry)
	}
	r, err := env.client.ReadFile(ctx, sb.ID, "/home/user/deep/er/nest/blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(back, big) {
		t.Fatalf("read back %d bytes (err %v), want the same 20 MiB", len(back), err)
	}
	// The sandbox sees the same bytes.
	sum := fmt.Sprintf("%x", sha256.Sum256(big))
	if out := execOK(t, sb.ID, "sha256sum /home/user/deep/er/nest/blob.bin"); !strings.HasPrefix(out, sum) {
		t.Fatalf("sha256 inside the sandbox = %q, want %s", out, sum)
	}

	// Binary content that is not UTF-8, and overwrite.
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0x80}
	for i := 0; i < 2; i++ {
		if _, err := env.client.WriteFile(ctx, sb.ID, "/tmp/bin", bytes.NewReader(bin)); err != nil {
			t.Fatal(err)
		}
	}
	if got := readAll(t, sb.ID, "/tmp/bin"); !bytes.Equal(got, bin) {
		t.Fatalf("binary round trip = %v", got)
	}

	// Listing with depth, mkdir, move, remove.
	if _, err := env.client.Mkdir(ctx, sb.ID, "/tmp/tree/a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.WriteFile(ctx, sb.ID, "/tmp/tree/a/b/file.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	list, err := env.client.ListDir(ctx, sb.ID, "/tmp/tree", 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range list.Entries {
		paths = append(paths, e.Path+":"+e.Type)
	}
	sort.Strings(paths)
	if got := strings.Join(paths, " "); got != "/tmp/tree/a/b/file.txt:file /tmp/tree/a/b:dir /tmp/tree/a:dir" {
		t.Fatalf("listing = %s", got)
	}
	if list, err = env.client.ListDir(ctx, sb.ID, "/tmp/tree", 1); err != nil || len(list.Entries) != 1 {
		t.Fatalf("depth 1 listing = %+v, %v", list, err)
	}
	if _, err := env.client.Move(ctx, sb.ID, "/tmp/tree/a/b/file.txt", "/tmp/moved.txt"); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, sb.ID, "/tmp/moved.txt"); string(got) != "x" {
		t.Fatalf("moved file holds %q", got)
	}
	if err := env.client.RemoveFile(ctx, sb.ID, "/tmp/tree"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.ReadFile(ctx, sb.ID, "/tmp/tree/a"); !client.IsNotFound(err) {
		t.Fatalf("removed tree still readable: %v", err)
	}
	if _, err := env.client.Mkdir(ctx, sb.ID, "/tmp"); !client.IsConflict(err) {
		t.Fatalf("mkdir of an existing dir: err %v, want 409", err)
	}
}

func readAll(t *testing.T, id, path string) []byte {
	t.Helper()
	r, err := env.client.ReadFile(testContext(t), id, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
