package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// BuilderVersion is hashed into every template ID. Bump it when a builder
// changes what it puts into a rootfs, so old templates are rebuilt rather
// than silently reused.
const BuilderVersion = "space-template-builder/2" // 2: steps in gVisor build sandboxes

// idPattern matches template IDs: the first 16 bytes of a sha256, in hex.
var idPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// resolvedRecipe is the canonical input of a template ID: the recipe with
// every outside reference replaced by a digest of what it points to (parent
// template ID, image manifest, file contents, busybox binary). It is
// hashed as JSON; encoding/json sorts map keys, so it is deterministic.
type resolvedRecipe struct {
	Builder  string            `json:"builder"`
	From     string            `json:"from"`
	Packages []string          `json:"packages,omitempty"`
	Run      []string          `json:"run,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	User     string            `json:"user,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	Files    []resolvedFile    `json:"files,omitempty"`
	Steps    []resolvedStep    `json:"steps,omitempty"`
	Start    string            `json:"start,omitempty"`
	Ready    string            `json:"ready,omitempty"`
	// MCPGateway is recipe.mcp.gateway; omitted when empty, so the ids
	// of templates without one did not change when it came.
	MCPGateway string `json:"mcp_gateway,omitempty"`
	// Runtimes are the backends built for beyond gVisor alone (see
	// Runtimes.resolved): another backend is another artifact.
	Runtimes []string `json:"runtimes,omitempty"`
	// TrustedCA is the fingerprint of the CA installed into the trust store.
	TrustedCA string `json:"trusted_ca,omitempty"`
}

type resolvedFile struct {
	Dest   string `json:"dest"`
	Mode   string `json:"mode,omitempty"`
	Digest string `json:"digest"`
}

// resolvedStep is a Step with its archive's name replaced by the digest
// of its content: a name is the client's claim, the content is what the
// step copies.
type resolvedStep struct {
	Run     string            `json:"run,omitempty"`
	User    string            `json:"user,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Archive string            `json:"archive,omitempty"`
	Src     string            `json:"src,omitempty"`
	Dest    string            `json:"dest,omitempty"`
	Mode    string            `json:"mode,omitempty"`
}

// resolveSteps pins the steps' archives to digests of their content.
func resolveSteps(steps []Step, archives map[string]string) ([]resolvedStep, error) {
	var out []resolvedStep
	digests := map[string]string{}
	for i, st := range steps {
		rs := resolvedStep{Run: st.Run, User: st.User, Workdir: st.Workdir, Env: st.Env}
		if c := st.Copy; c != nil {
			loc, ok := archives[c.Archive]
			if !ok {
				return nil, fmt.Errorf("recipe: steps[%d].copy.archive: no uploaded files with hash %s", i, c.Archive)
			}
			if _, ok := digests[c.Archive]; !ok {
				d, err := fileDigest(loc)
				if err != nil {
					return nil, fmt.Errorf("recipe: steps[%d].copy.archive: uploaded files %s: %w", i, c.Archive, err)
				}
				digests[c.Archive] = d
			}
			rs.Archive, rs.Src, rs.Dest, rs.Mode = digests[c.Archive], c.Src, c.Dest, c.Mode
		}
		out = append(out, rs)
	}
	return out, nil
}

// id hashes the resolved recipe.
func (r *resolvedRecipe) id() string {
	data, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("marshal resolved recipe: %v", err)) // plain data: cannot fail
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// resolveFiles pins the recipe's files to digests of their current content.
func resolveFiles(files []FileCopy, baseDir string) ([]resolvedFile, error) {
	var out []resolvedFile
	for i, f := range files {
		src, err := hostPath(f.Src, baseDir)
		if err != nil {
			return nil, fmt.Errorf("files[%d].src: %w", i, err)
		}
		digest, err := treeDigest(src)
		if err != nil {
			return nil, fmt.Errorf("files[%d].src: %w", i, err)
		}
		out = append(out, resolvedFile{Dest: filepath.Clean(f.Dest), Mode: f.Mode, Digest: digest})
	}
	return out, nil
}

// hostPath resolves a recipe path against the recipe's directory. Without
// a directory (a recipe sent over the API) relative paths are refused
// rather than resolved against the server's working directory.
func hostPath(p, baseDir string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	if baseDir == "" {
		return "", fmt.Errorf("relative path %q needs the recipe's directory, and none was given", p)
	}
	return filepath.Join(baseDir, p), nil
}

// treeDigest hashes a file or directory tree: relative paths, types,
// permission bits, file contents and link targets. Owners and times are
// left out because copies into the rootfs do not keep them.
func treeDigest(root string) (string, error) {
	h := sha256.New()
	info, err := os.Stat(root)
	if err != nil {
		return "", err
	}
	if !info.IsDir() {
		if err := hashEntry(h, ".", root, info); err != nil {
			return "", err
		}
		return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
	}
	var paths []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		if err := hashEntry(h, rel, p, info); err != nil {
			return "", err
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func hashEntry(h hash.Hash, rel, p string, info fs.FileInfo) error {
	fmt.Fprintf(h, "%q %v\n", filepath.ToSlash(rel), info.Mode())
	switch {
	case info.Mode().IsRegular():
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(h, "%d\n", info.Size())
		if _, err := io.Copy(h, f); err != nil {
			return fmt.Errorf("hash %s: %w", p, err)
		}
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "-> %q\n", target)
	}
	return nil
}

// fileDigest is the sha256 of one file's content.
func fileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
