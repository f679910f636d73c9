package dirlist

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree makes a directory with nested entries and returns it and the
// expected full pre-order listing to depth levels.
func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for i := range 30 {
		name := fmt.Sprintf("f%02d", (i*7)%30) // created out of order
		if err := os.WriteFile(filepath.Join(root, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"d1/a/x", "d1/b", "d2", "e/deep/er/still"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"d1/a/x/1", "d1/a/2", "d1/b/3", "d2/4", "e/deep/er/still/5"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("d1", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	return root
}

// reference lists like the package promises: pre-order, children sorted.
func reference(t *testing.T, root string, depth int) []string {
	var out []string
	var walk func(rel string, level int)
	walk = func(rel string, level int) {
		ents, err := os.ReadDir(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents { // os.ReadDir sorts by name
			child := join(rel, e.Name())
			out = append(out, child)
			if level < depth && e.IsDir() {
				walk(child, level+1)
			}
		}
	}
	walk(".", 1)
	return out
}

func pageAll(t *testing.T, fsys FS, depth, limit int) []string {
	t.Helper()
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("listing does not end")
		}
		n := 0
		next, err := Page(context.Background(), fsys, depth, limit, after, func(rel string, _ fs.FileInfo) error {
			got = append(got, rel)
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n > limit {
			t.Fatalf("page of %d entries, limit %d", n, limit)
		}
		if next == "" {
			return got
		}
		if n != limit {
			t.Fatalf("short page (%d of %d) with a next cursor", n, limit)
		}
		c, err := DecodeCursor(EncodeCursor(next))
		if err != nil || c != next {
			t.Fatalf("cursor %q does not round-trip: %q %v", next, c, err)
		}
		after = next
	}
}

func TestPagesMatchSortedPreOrder(t *testing.T) {
	root := tree(t)
	for _, depth := range []int{1, 2, 3, 5} {
		want := reference(t, root, depth)
		for _, limit := range []int{1, 2, 3, 7, len(want) - 1, len(want), len(want) + 1, 10000} {
			if limit < 1 {
				continue
			}
			if got := pageAll(t, Dir(root), depth, limit); !slices.Equal(got, want) {
				t.Errorf("depth %d limit %d:\n got %v\nwant %v", depth, limit, got, want)
			}
		}
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, want := pageAll(t, r, 3, 4), reference(t, root, 3); !slices.Equal(got, want) {
		t.Errorf("through os.Root:\n got %v\nwant %v", got, want)
	}
}

// Entries present during the whole listing are seen exactly once even when
// others are created and removed between pages.
func TestCursorSurvivesChanges(t *testing.T) {
	root := t.TempDir()
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("keep%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	after := ""
	for round := 0; ; round++ {
		next, err := Page(context.Background(), Dir(root), 1, 9, after, func(rel string, _ fs.FileInfo) error {
			seen[rel]++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Churn: new names on both sides of the cursor, and the cursor's
		// own entry removed.
		for _, n := range []string{fmt.Sprintf("a-new%d", round), fmt.Sprintf("z-new%d", round)} {
			if err := os.WriteFile(filepath.Join(root, n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if strings.HasPrefix(next, "a-new") || strings.HasPrefix(next, "z-new") {
			_ = os.Remove(filepath.Join(root, next))
		}
		if next == "" {
			break
		}
		after = next
	}
	for i := range 200 {
		if n := seen[fmt.Sprintf("keep%03d", i)]; n != 1 {
			t.Errorf("keep%03d seen %d times", i, n)
		}
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s seen %d times", name, n)
		}
	}
}

func TestSmallestAfterBoundsMemory(t *testing.T) {
	root := t.TempDir()
	for i := range 5000 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("%05d", 4999-i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, more, err := smallestAfter(f, "01000", 10)
	if err != nil {
		t.Fatal(err)
	}
	if !more || len(names) != 10 || names[0] != "01001" || names[9] != "01010" || cap(names) > 20 {
		t.Errorf("got %v more=%v cap=%d", names, more, cap(names))
	}
	names, more, err = smallestAfter(f, "04995", 10)
	if err != nil || more || !slices.Equal(names, []string{"04996", "04997", "04998", "04999"}) {
		t.Errorf("tail: %v more=%v err=%v", names, more, err)
	}
}

func TestBadCursors(t *testing.T) {
	for _, c := range []string{"!!!", EncodeCursor("/etc"), EncodeCursor("../x"), EncodeCursor("a/../b"), EncodeCursor("a\x00b"), EncodeCursor("..")} {
		if _, err := DecodeCursor(c); err == nil {
			t.Errorf("cursor %q accepted", c)
		}
	}
}
