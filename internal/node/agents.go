package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// A saved image (a suspend image, a snapshot's or a branch's memory, a
// pre-booted template) holds in memory the agent process that ran when it
// was taken, and that process's executable is the file bind-mounted into
// the sandbox from the host. Restored over another binary (the operator
// upgraded space), the agent never comes up. So the node keeps every agent
// binary it has run, content-addressed under <state>/agents/<sha256>/, each
// image records the digest of its agent (imageAgentFile) and carries a hard
// link of the binary itself (imageAgentBinary, so an image sent to another
// node brings its agent along), and a restore mounts the recorded one.
const (
	imageAgentFile   = "agent-digest"
	imageAgentBinary = agentName
	// legacyAgentFile names, in the store, the digest of the binary found
	// in the single-agent directory of nodes from before the store: the
	// agent that images without a digest were taken with.
	legacyAgentFile = "legacy"
	// sandboxAgentsDir holds, per sandbox, the digest of the agent its
	// runtime mounts, so that a node restarted under a running sandbox
	// knows which agent it adopts.
	sandboxAgentsDir = "sandboxes"
)

// agentStore is the node's content-addressed directory of agent binaries.
type agentStore struct {
	dir string
	// mu orders collect against what adds a reference (a restore mounting
	// an agent, a record of a running sandbox).
	mu sync.Mutex
}

func validDigest(d string) bool {
	if len(d) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(d)
	return err == nil && strings.ToLower(d) == d
}

// mountDir is the directory mounted into a sandbox for the agent digest.
func (s *agentStore) mountDir(digest string) string { return filepath.Join(s.dir, digest) }

func (s *agentStore) binary(digest string) string {
	return filepath.Join(s.mountDir(digest), agentName)
}

func (s *agentStore) has(digest string) bool {
	_, err := os.Stat(s.binary(digest))
	return err == nil
}

// add copies the file at src into the store and returns its digest. When
// want is set, the file must hash to it. A binary already stored is left
// as it is: its bytes are what running sandboxes execute.
func (s *agentStore) add(src, want string) (string, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return "", err
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.MkdirTemp(s.dir, ".incoming-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	out, err := os.OpenFile(filepath.Join(tmp, agentName), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	if _, err := io.Copy(io.MultiWriter(out, sum), in); err != nil {
		out.Close()
		return "", err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	digest := hex.EncodeToString(sum.Sum(nil))
	if want != "" && digest != want {
		return "", fmt.Errorf("agent binary hashes to %s, not %s", digest, want)
	}
	if s.has(digest) {
		return digest, nil
	}
	_ = os.RemoveAll(s.mountDir(digest)) // a torn entry: no binary in it
	if err := os.Rename(tmp, s.mountDir(digest)); err != nil {
		return "", err
	}
	return digest, syncDir(s.dir)
}

// digests lists the stored agents.
func (s *agentStore) digests() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && validDigest(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func (s *agentStore) recordPath(id string) string {
	return filepath.Join(s.dir, sandboxAgentsDir, id)
}

// record notes that sandbox id's runtime mounts agent digest.
func (s *agentStore) record(id, digest string) error {
	if err := os.MkdirAll(filepath.Join(s.dir, sandboxAgentsDir), 0o755); err != nil {
		return err
	}
	return writeFileSync(s.recordPath(id), []byte(digest))
}

// recorded is the agent sandbox id's runtime mounts, "" if unknown.
func (s *agentStore) recorded(id string) string {
	b, err := os.ReadFile(s.recordPath(id))
	if d := strings.TrimSpace(string(b)); err == nil && validDigest(d) {
		return d
	}
	return ""
}

// recordedIDs are the sandboxes with a record, those whose release has not
// dropped it yet (and build sandboxes' of versions that never did).
func (s *agentStore) recordedIDs() []string {
	if s == nil {
		return nil
	}
	return dirNames(filepath.Join(s.dir, sandboxAgentsDir))
}

// forget drops sandbox id's record; a node without a store (a unit
// test's) has none.
func (s *agentStore) forget(id string) {
	if s != nil {
		_ = os.Remove(s.recordPath(id))
	}
}

// readImageAgent is the agent digest an image directory records, "" for
// an image from before images recorded it.
func readImageAgent(imageDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(imageDir, imageAgentFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	d := strings.TrimSpace(string(b))
	if !validDigest(d) {
		return "", fmt.Errorf("the image records a malformed agent digest")
	}
	return d, nil
}

// stampImage records agent digest in an image directory and links the
// binary into it (a copy where a link cannot be made), so that the image
// names and carries the agent its memory holds.
func (n *Node) stampImage(imageDir, digest string) error {
	bin := filepath.Join(imageDir, imageAgentBinary)
	_ = os.Remove(bin)
	if err := os.Link(n.agents.binary(digest), bin); err != nil {
		if err := copyFile(n.agents.binary(digest), bin); err != nil {
			return fmt.Errorf("keep the agent with the image: %w", err)
		}
	}
	if err := writeFileSync(filepath.Join(imageDir, imageAgentFile), []byte(digest)); err != nil {
		return fmt.Errorf("record the image's agent: %w", err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeFileStream(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// sandboxAgent is the digest of the agent sandbox id runs: what an image
// of it holds.
func (n *Node) sandboxAgent(id string) string {
	if sb, err := n.lookup(id); err == nil && sb.agent() != "" {
		return sb.agent()
	}
	if d := n.agents.recorded(id); d != "" {
		return d
	}
	return n.agentDigest
}

// imageAgent decides which agent a restore from imageDir mounts, makes
// sure the store has it (taking it from the image's own copy if need be),
// and records it as sandbox id's. guessed says the image records no agent
// (it is older than the store): the node then takes the agent of its
// first start with the store if it knew one, else the current one.
func (n *Node) imageAgent(id, imageDir string) (digest string, guessed bool, err error) {
	digest, err = readImageAgent(imageDir)
	if err != nil {
		return "", false, err
	}
	if digest == "" {
		guessed = true
		digest = n.legacyDigest
		if digest == "" {
			digest = n.agentDigest
		}
	}
	n.agents.mu.Lock()
	defer n.agents.mu.Unlock()
	if !n.agents.has(digest) {
		if _, err := n.agents.add(filepath.Join(imageDir, imageAgentBinary), digest); err != nil {
			return "", guessed, fmt.Errorf("the image was taken with agent %.12s, which this node does not have and the image does not carry: %w", digest, errNoAgent)
		}
	}
	if err := n.agents.record(id, digest); err != nil {
		return "", guessed, fmt.Errorf("record the agent of %s: %w", id, err)
	}
	return digest, guessed, nil
}

// errNoAgent: an image's agent binary is nowhere to be had.
var errNoAgent = errors.New("agent binary missing")

// setupAgents opens the node's agent store: it adopts the binary of the
// single-agent directory older nodes kept (the agent images without a
// digest were taken with), installs the configured binary, and stamps
// the checkpoint images that record no agent with the adopted one.
func (n *Node) setupAgents(binary string) error {
	n.agents = &agentStore{dir: filepath.Join(n.cfg.StateDir, "agents")}
	if err := os.MkdirAll(n.agents.dir, 0o755); err != nil {
		return fmt.Errorf("agent store: %w", err)
	}
	legacyPath := filepath.Join(n.agents.dir, legacyAgentFile)
	if b, err := os.ReadFile(legacyPath); err == nil && validDigest(strings.TrimSpace(string(b))) {
		n.legacyDigest = strings.TrimSpace(string(b))
	} else if old := filepath.Join(n.cfg.StateDir, "agent", agentName); fileExists(old) {
		d, err := n.agents.add(old, "")
		if err != nil {
			return fmt.Errorf("agent store: adopt the previous agent: %w", err)
		}
		if err := writeFileSync(legacyPath, []byte(d)); err != nil {
			return fmt.Errorf("agent store: %w", err)
		}
		n.legacyDigest = d
	}
	digest, err := n.agents.add(binary, "")
	if err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	n.agentDigest = digest
	if n.legacyDigest != "" {
		if err := n.stampLegacyImages(); err != nil {
			n.log.Warn("record the agent of older images", "err", err)
		}
	}
	n.collectAgents()
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// stampLegacyImages records the adopted agent in complete checkpoint
// images that record none, once: from then on they carry their agent
// wherever they are sent.
func (n *Node) stampLegacyImages() error {
	return filepath.WalkDir(n.cfg.ImagesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() || !imageComplete(p) {
			return nil
		}
		if digest, err := readImageAgent(p); err == nil && digest == "" {
			if err := n.stampImage(p, n.legacyDigest); err != nil {
				return err
			}
		}
		return fs.SkipDir
	})
}

// collectAgents removes the stored agents that nothing refers to: not the
// current one, not the adopted one of older nodes (sandboxes adopted from
// before the store may still suspend with it), none that a checkpoint
// image records, none that a sandbox's runtime mounts. Template images of
// another agent do not count: they are booted anew, never restored.
func (n *Node) collectAgents() {
	if n.agents == nil {
		return
	}
	n.agents.mu.Lock()
	defer n.agents.mu.Unlock()
	keep := map[string]bool{n.agentDigest: true, n.legacyDigest: true}
	templates := filepath.Join(n.cfg.ImagesDir, templatesDir)
	err := filepath.WalkDir(n.cfg.ImagesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() && d.Name() == imageAgentFile {
			dir := filepath.Dir(p)
			digest, err := readImageAgent(dir)
			if err != nil {
				return err
			}
			// A template image of another agent is never restored
			// (loadTemplateImage boots it anew), so it needs no binary.
			if filepath.Dir(dir) != templates || digest == n.agentDigest {
				keep[digest] = true
			}
		}
		return nil
	})
	if err != nil {
		n.log.Warn("collect agent binaries: images unreadable; keeping every one", "err", err)
		return
	}
	for _, id := range n.agents.recordedIDs() {
		keep[n.agents.recorded(id)] = true
	}
	digests, err := n.agents.digests()
	if err != nil {
		n.log.Warn("collect agent binaries", "err", err)
		return
	}
	for _, d := range digests {
		if keep[d] {
			continue
		}
		if err := os.RemoveAll(n.agents.mountDir(d)); err != nil {
			n.log.Warn("remove an agent binary no image refers to", "digest", d, "err", err)
		} else {
			n.log.Info("removed an agent binary no image refers to", "digest", d)
		}
	}
}
