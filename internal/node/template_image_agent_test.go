package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-platform/space/internal/runtime"
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
	k := imageKey{template: "tpl1", runtime: runtime.GVisor, legacy: true}
	for digest, usable := range map[string]bool{"digest-of-the-installed-agent": true, "digest-of-an-older-agent": false, "": false} {
		mkImage(t, n, "templates/tpl1", true)
		meta, _ := json.Marshal(TemplateImage{TemplateID: "tpl1", Volume: templateImageVolume(k), AgentDigest: digest})
		if err := os.WriteFile(filepath.Join(n.templateImageDir(k), imageMetaFile), meta, 0o600); err != nil {
			t.Fatal(err)
		}
		img, err := n.loadTemplateImage(k)
		if usable != (err == nil) {
			t.Errorf("image booted with agent %q: %+v, %v; usable %v", digest, img, err, usable)
		}
	}
}
