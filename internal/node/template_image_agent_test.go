package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// everyVolume reports every volume as present.
type everyVolume struct{ Volumes }

func (everyVolume) Exists(string) bool { return true }

// A pre-booted template image holds, in memory, the agent that booted it;
// after the node's agent changed (an upgrade) the image is not used but
// booted anew, as also one from before images recorded their agent.
func TestTemplateImageOfAnotherAgentIsBootedAnew(t *testing.T) {
	n := testNode(t)
	n.cfg.Volumes = everyVolume{}
	n.agentDigest = "digest-of-the-installed-agent"
	for digest, usable := range map[string]bool{"digest-of-the-installed-agent": true, "digest-of-an-older-agent": false, "": false} {
		mkImage(t, n, "templates/tpl1", true)
		meta, _ := json.Marshal(TemplateImage{TemplateID: "tpl1", Volume: templateImageVolume("tpl1"), AgentDigest: digest})
		if err := os.WriteFile(filepath.Join(n.templateImageDir("tpl1"), imageMetaFile), meta, 0o600); err != nil {
			t.Fatal(err)
		}
		img, err := n.loadTemplateImage("tpl1")
		if usable != (err == nil) {
			t.Errorf("image booted with agent %q: %+v, %v; usable %v", digest, img, err, usable)
		}
	}
}

func TestInstallAgentReturnsTheDigestOfWhatItInstalled(t *testing.T) {
	src := filepath.Join(t.TempDir(), "space-agent")
	if err := os.WriteFile(src, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	digest, err := installAgent(src, dir)
	if err != nil || digest != "d4f0bc5a29de06b510f9aa428f1eedba926012b591fef7a518e776a7c9bd1824" { // sha256("agent")
		t.Fatalf("installAgent = %q, %v", digest, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, agentName)); err != nil || string(b) != "agent" {
		t.Fatalf("installed %q, %v", b, err)
	}
}
