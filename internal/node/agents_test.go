package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func digestOf(b string) string {
	sum := sha256.Sum256([]byte(b))
	return hex.EncodeToString(sum[:])
}

func writeAgent(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), agentName)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func agentNode(t *testing.T, state string) *Node {
	t.Helper()
	return &Node{cfg: Config{StateDir: state, ImagesDir: filepath.Join(state, "images")}, log: slog.Default(), sandboxes: map[string]*Sandbox{}}
}

// An upgrade keeps the agent of the node's previous start (from before the
// store: its single agent directory) and every image that records no agent
// is stamped with it; the new agent is what new sandboxes mount.
func TestSetupAgentsAdoptsTheAgentOfOlderNodesForTheirImages(t *testing.T) {
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "agent", agentName), []byte("old agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	n := agentNode(t, state)
	mkImage(t, n, "sb1/suspend", true)
	mkImage(t, n, "sb2/snapshots/s1", false) // torn: left alone
	if err := n.setupAgents(writeAgent(t, "new agent")); err != nil {
		t.Fatal(err)
	}
	if n.agentDigest != digestOf("new agent") || n.legacyDigest != digestOf("old agent") {
		t.Fatalf("current %s, legacy %s", n.agentDigest, n.legacyDigest)
	}
	if b, err := os.ReadFile(n.agents.binary(n.agentDigest)); err != nil || string(b) != "new agent" {
		t.Fatalf("new sandboxes mount %q, %v", b, err)
	}
	dir := filepath.Join(n.cfg.ImagesDir, "sb1", "suspend")
	if d, err := readImageAgent(dir); err != nil || d != n.legacyDigest {
		t.Fatalf("older image records %q, %v; want the adopted agent", d, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, imageAgentBinary)); err != nil || string(b) != "old agent" {
		t.Fatalf("older image carries %q, %v", b, err)
	}
	if d, _ := readImageAgent(filepath.Join(n.cfg.ImagesDir, "sb2", "snapshots", "s1")); d != "" {
		t.Fatalf("torn image stamped with %s", d)
	}
	// A second start remembers which agent was the old one, though the
	// old directory is gone by then.
	if err := os.RemoveAll(filepath.Join(state, "agent")); err != nil {
		t.Fatal(err)
	}
	again := agentNode(t, state)
	if err := again.setupAgents(writeAgent(t, "newer agent")); err != nil {
		t.Fatal(err)
	}
	if again.legacyDigest != digestOf("old agent") {
		t.Fatalf("legacy after a restart: %s", again.legacyDigest)
	}
}

// An agent no image, no sandbox and not the node runs any more is removed;
// the others stay.
func TestCollectAgentsKeepsWhatImagesAndSandboxesUse(t *testing.T) {
	state := t.TempDir()
	n := agentNode(t, state)
	if err := n.setupAgents(writeAgent(t, "v1")); err != nil {
		t.Fatal(err)
	}
	mkImage(t, n, "sb1/suspend", true)
	if err := n.stampImage(filepath.Join(n.cfg.ImagesDir, "sb1", "suspend"), digestOf("v1")); err != nil {
		t.Fatal(err)
	}
	if err := n.agents.record("sb2", digestOf("v1")); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v2", "v3"} {
		n = agentNode(t, state)
		if err := n.setupAgents(writeAgent(t, v)); err != nil {
			t.Fatal(err)
		}
	}
	// v2 was current once and nothing refers to it now.
	if n.agents.has(digestOf("v2")) || !n.agents.has(digestOf("v1")) || !n.agents.has(digestOf("v3")) {
		t.Fatalf("after an upgrade to v3: v1 %v v2 %v v3 %v", n.agents.has(digestOf("v1")), n.agents.has(digestOf("v2")), n.agents.has(digestOf("v3")))
	}
	if err := n.DeleteImage(t.Context(), "sb1/suspend"); err != nil {
		t.Fatal(err)
	}
	if !n.agents.has(digestOf("v1")) {
		t.Fatal("v1 removed while a sandbox runs it")
	}
	n.agents.forget("sb2")
	n.collectAgents()
	if n.agents.has(digestOf("v1")) || !n.agents.has(digestOf("v3")) {
		t.Fatalf("after the last reference went: v1 %v v3 %v", n.agents.has(digestOf("v1")), n.agents.has(digestOf("v3")))
	}
}

// A restore takes the agent its image records; one the node lacks comes
// from the image's own copy (an image sent from another node), verified
// against the digest.
func TestImageAgentTakesTheAgentTheImageCarries(t *testing.T) {
	n := agentNode(t, t.TempDir())
	if err := n.setupAgents(writeAgent(t, "current")); err != nil {
		t.Fatal(err)
	}
	mk := func(name, digest, binary string) string {
		mkImage(t, n, name, true)
		dir := filepath.Join(n.cfg.ImagesDir, filepath.FromSlash(name))
		if digest != "" {
			if err := os.WriteFile(filepath.Join(dir, imageAgentFile), []byte(digest), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if binary != "" {
			if err := os.WriteFile(filepath.Join(dir, imageAgentBinary), []byte(binary), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	d, guessed, err := n.imageAgent("sb1", mk("sb1/suspend", digestOf("elsewhere"), "elsewhere"))
	if err != nil || d != digestOf("elsewhere") || guessed || !n.agents.has(d) || n.agents.recorded("sb1") != d {
		t.Fatalf("image from another node: %s %v %v", d, guessed, err)
	}
	if _, _, err := n.imageAgent("sb2", mk("sb2/suspend", digestOf("claimed"), "tampered")); err == nil || !errors.Is(err, errNoAgent) {
		t.Fatalf("image whose binary is not its digest: %v", err)
	}
	if n.agents.has(digestOf("tampered")) {
		t.Fatal("a binary that does not match its digest was stored")
	}
	if _, _, err := n.imageAgent("sb3", mk("sb3/suspend", digestOf("gone"), "")); !errors.Is(err, errNoAgent) {
		t.Fatalf("image without its agent: %v", err)
	}
	if _, _, err := n.imageAgent("sb4", mk("sb4/suspend", "../../etc", "")); err == nil {
		t.Fatal("a malformed digest was taken")
	}
	d, guessed, err = n.imageAgent("sb5", mk("sb5/suspend", "", ""))
	if err != nil || !guessed || d != n.agentDigest {
		t.Fatalf("image older than digests on a node that never had an older agent: %s %v %v", d, guessed, err)
	}
}

// A template image of an agent other than the current one is booted anew,
// never restored: it keeps no agent binary alive.
func TestCollectAgentsIgnoresTemplateImagesOfOtherAgents(t *testing.T) {
	state := t.TempDir()
	n := agentNode(t, state)
	if err := n.setupAgents(writeAgent(t, "v1")); err != nil {
		t.Fatal(err)
	}
	mkImage(t, n, "templates/tpl1", true)
	if err := n.stampImage(n.templateImageDir(imageKey{template: "tpl1", legacy: true}), digestOf("v1")); err != nil {
		t.Fatal(err)
	}
	n.collectAgents()
	if !n.agents.has(digestOf("v1")) {
		t.Fatal("the current agent was removed")
	}
	n = agentNode(t, state)
	if err := n.setupAgents(writeAgent(t, "v2")); err != nil {
		t.Fatal(err)
	}
	if n.agents.has(digestOf("v1")) {
		t.Fatal("a stale template image kept its agent")
	}
}
