package e2e

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// In a cluster a volume lives on one node (reached over the node RPC):
// sandboxes that mount it are placed there and share it, its files API
// works from the control plane, and a drain of its node leaves them
// where they are, saying why.
func TestClusterVolumes(t *testing.T) {
	c := startCluster(t, 2)
	ctx := testContext(t)
	cl := c.client
	vol, err := cl.CreateVolume(ctx, apiv1.CreateVolumeRequest{Name: "cluster-data", SizeMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if vol.Node == "" {
		t.Fatalf("volume without a node: %+v", vol)
	}
	if _, err := cl.WriteVolumeFile(ctx, vol.ID, "/seed", strings.NewReader("over the node rpc")); err != nil {
		t.Fatalf("write through the control plane: %v", err)
	}
	var ids []string
	for i := range 4 {
		sb, err := cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", VolumeMounts: []apiv1.VolumeMount{{Volume: vol.Name, Path: "/data"}}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if sb, err = cl.WaitSandbox(ctx, sb.ID, apiv1.StateRunning, 2*time.Minute); err != nil {
			t.Fatalf("wait for %s: %v", sb.ID, err)
		}
		if sb.Node != vol.Node {
			t.Fatalf("sandbox %s mounting the volume runs on %s, the volume lives on %s", sb.ID, sb.Node, vol.Node)
		}
		ids = append(ids, sb.ID)
	}
	execOn(t, cl, ids[0], "cat /data/seed > /data/copy && echo from-0 > /data/zero")
	res, err := cl.Exec(ctx, ids[3], apiv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", "cat /data/copy /data/zero"}})
	if err != nil || res.Stdout != "over the node rpcfrom-0\n" {
		t.Fatalf("the fourth sandbox reads %+v, %v", res, err)
	}
	r, err := cl.ReadVolumeFile(ctx, vol.ID, "/zero")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "from-0\n" {
		t.Fatalf("volume API reads %q", got)
	}
	// A drain of the volume's node moves none of them.
	if _, err := cl.DrainNode(ctx, vol.Node); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := cl.GetNode(ctx, vol.Node)
		if err == nil && strings.Contains(n.Reason, "4 could not be moved") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drain did not report the sandboxes it left: %+v %v", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range ids {
		sb, err := cl.GetSandbox(ctx, id)
		if err != nil || sb.Node != vol.Node || sb.State != apiv1.StateRunning {
			t.Fatalf("sandbox %s after the drain: %+v %v", id, sb, err)
		}
		evs, err := cl.Events(ctx, id)
		said := false
		for _, ev := range evs {
			said = said || ev.Type == "drain" && strings.Contains(ev.Message, "volumes do not move")
		}
		if err != nil || !said {
			t.Fatalf("sandbox %s's events do not say why it stayed: %+v %v", id, evs, err)
		}
	}
	// A draining node takes no new sandbox, and the refusal says where.
	_, err = cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", VolumeMounts: []apiv1.VolumeMount{{Volume: vol.Name, Path: "/data"}}})
	if err == nil || !strings.Contains(err.Error(), vol.Node) {
		t.Fatalf("create on the draining volume node: %v, want a refusal naming it", err)
	}
	for _, id := range ids {
		if err := cl.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.DeleteVolume(ctx, vol.ID); err != nil {
		t.Fatalf("delete the volume: %v", err)
	}
}
