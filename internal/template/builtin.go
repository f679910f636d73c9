package template

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The built-in recipes ship inside the binary so that `space serve` can
// build them on a fresh host without any files around. A recipe's
// companion files live next to it (recipes/<name>/...) and are referred to
// as "builtin:<name>/<file>" in its files list.
//
//go:embed recipes
var builtinFS embed.FS

// builtinRoot is the directory of builtinFS that builtin: sources are
// relative to.
const builtinRoot = "recipes"

// builtinPrefix marks a FileCopy source shipped in the binary.
const builtinPrefix = "builtin:"

// Builtin returns a fresh copy of the built-in recipe called name.
func Builtin(name string) (*Recipe, bool) {
	if !fs.ValidPath(name) || strings.Contains(name, "/") {
		return nil, false
	}
	data, err := builtinFS.ReadFile(builtinRoot + "/" + name + ".yaml")
	if err != nil {
		return nil, false
	}
	r, err := ParseRecipe(data)
	if err != nil {
		panic(fmt.Sprintf("built-in recipe %s is invalid: %v", name, err)) // caught by tests
	}
	if r.Name == "" {
		r.Name = name
	}
	return r, true
}

// BuiltinNames lists the built-in recipes, sorted.
func BuiltinNames() []string {
	entries, _ := fs.ReadDir(builtinFS, builtinRoot)
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// builtinSource reports whether a FileCopy source is a builtin: one, and
// the path it names under the built-in recipes.
func builtinSource(src string) (string, bool) {
	return strings.CutPrefix(src, builtinPrefix)
}

// checkBuiltinSource checks that rel names a file or directory shipped
// with the built-in recipes.
func checkBuiltinSource(rel string) error {
	if rel == "" || rel == "." || !fs.ValidPath(rel) {
		return fmt.Errorf("%s%s: want %s<path> with a relative, clean path", builtinPrefix, rel, builtinPrefix)
	}
	if _, err := fs.Stat(builtinFS, path.Join(builtinRoot, rel)); err != nil {
		return fmt.Errorf("%s%s: no such built-in file", builtinPrefix, rel)
	}
	return nil
}

// materializeBuiltin writes the built-in file or directory rel into
// cacheDir, where builds can copy it from like any host file, and returns
// its path. The copy is keyed by a digest of its content, written with
// fixed permissions (0644 files, 0755 directories, whatever the umask),
// and never changed once in place, so a template's ID (which hashes the
// copy) depends on the content only.
func materializeBuiltin(cacheDir, rel string) (string, error) {
	if err := checkBuiltinSource(rel); err != nil {
		return "", err
	}
	src := path.Join(builtinRoot, rel)
	digest, err := builtinDigest(src)
	if err != nil {
		return "", err
	}
	parent := filepath.Join(cacheDir, "builtin")
	final := filepath.Join(parent, digest)
	target := filepath.Join(final, filepath.FromSlash(rel))
	if _, err := os.Lstat(target); err == nil {
		return target, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone after a successful rename
	if err := writeBuiltinTree(src, filepath.Join(tmp, filepath.FromSlash(rel))); err != nil {
		return "", fmt.Errorf("%s%s: %w", builtinPrefix, rel, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another build put the same content in place first.
		if _, serr := os.Lstat(target); serr == nil {
			return target, nil
		}
		return "", err
	}
	return target, nil
}

// builtinDigest hashes the paths and contents under an embedded path.
func builtinDigest(src string) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(builtinFS, src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%q %t\n", p, d.IsDir())
		if !d.IsDir() {
			data, err := builtinFS.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%d\n", len(data))
			h.Write(data)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// writeBuiltinTree copies an embedded file or directory to dest on the
// host, creating dest's parents.
func writeBuiltinTree(src, dest string) error {
	return fs.WalkDir(builtinFS, src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, src), "/")
		out := filepath.Join(dest, filepath.FromSlash(rel))
		if err := mkdirAllMode(filepath.Dir(out)); err != nil {
			return err
		}
		if d.IsDir() {
			if err := os.Mkdir(out, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return os.Chmod(out, 0o755)
		}
		data, err := builtinFS.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			return err
		}
		return os.Chmod(out, 0o644)
	})
}

// mkdirAllMode is os.MkdirAll with 0755 directories regardless of umask.
func mkdirAllMode(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := mkdirAllMode(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, 0o755)
}
