package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// crashMatrix is the state of TestCrashMatrix: one separate server and
// every write it acknowledged.
type crashMatrix struct {
	t   *testing.T
	s   *crashServer
	ctx context.Context
	// acked holds, per sandbox, the files whose writes were answered 200
	// and what they must hold.
	acked map[string]map[string]string
	// seen is every sandbox the test learned of, deleted ones included,
	// for the leak checks.
	seen map[string]bool
	// deleted sandboxes must be gone after recovery.
	deleted map[string]bool
	n       int
	// crashes and checks count the kills and the acknowledged writes
	// read back after them.
	crashes, checks int
}

func (m *crashMatrix) write(id, path, content string) {
	m.t.Helper()
	if _, err := m.s.client.WriteFile(m.ctx, id, path, strings.NewReader(content)); err != nil {
		m.t.Fatalf("write %s:%s: %v", id, path, err)
	}
	if m.acked[id] == nil {
		m.acked[id] = map[string]string{}
	}
	m.acked[id][path] = content
}

// writeSome acknowledges a few fresh writes in id.
func (m *crashMatrix) writeSome(id string) {
	for i := 0; i < 3; i++ {
		m.n++
		m.write(id, fmt.Sprintf("/home/user/w%03d.txt", m.n), fmt.Sprintf("write %d", m.n))
	}
}

func (m *crashMatrix) create(req apiv1.CreateSandboxRequest) string {
	m.t.Helper()
	sb, err := m.s.client.CreateSandbox(m.ctx, req)
	if err != nil {
		m.t.Fatal(err)
	}
	m.seen[sb.ID] = true
	if _, err := m.s.client.WaitSandbox(m.ctx, sb.ID, apiv1.StateRunning, time.Minute); err != nil {
		m.t.Fatalf("wait for %s: %v", sb.ID, err)
	}
	return sb.ID
}

func (m *crashMatrix) read(id, path string) string {
	m.t.Helper()
	r, err := m.s.client.ReadFile(m.ctx, id, path)
	if err != nil {
		return "<missing: " + err.Error() + ">"
	}
	defer r.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// crash arms point, runs op (which the server does not survive) and starts
// the server again on the same data directory, disarmed.
func (m *crashMatrix) crash(point string, op func() error) (opErr error) {
	m.t.Helper()
	if err := os.WriteFile(m.s.crashFile, []byte(point), 0o600); err != nil {
		m.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- op() }()
	if !m.s.died(time.Minute) {
		m.t.Fatalf("the server never reached crash point %s", point)
	}
	opErr = <-done
	m.crashes++
	if err := os.WriteFile(m.s.crashFile, nil, 0o600); err != nil {
		m.t.Fatal(err)
	}
	m.s.start()
	return opErr
}

// settle waits until no sandbox is starting any more, then checks the
// promises of recovery: nothing failed, nothing deleted is back, every
// acknowledged write is where it was, and nothing leaked.
func (m *crashMatrix) settle(after string) []apiv1.Sandbox {
	t := m.t
	t.Helper()
	var list []apiv1.Sandbox
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var err error
		if list, err = m.s.client.ListSandboxes(m.ctx, client.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		starting := 0
		for _, sb := range list {
			m.seen[sb.ID] = true
			if sb.State == apiv1.StateStarting || sb.State == apiv1.StateStopping {
				starting++
			}
		}
		if starting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a crash at %s: %d sandboxes still starting", after, starting)
		}
		time.Sleep(100 * time.Millisecond)
	}
	live := map[string]apiv1.Sandbox{}
	for _, sb := range list {
		live[sb.ID] = sb
	}
	// Before the reads below, which resume suspended sandboxes.
	m.checkLeaks(after, live)
	for _, sb := range list {
		if sb.State == apiv1.StateFailed {
			t.Errorf("after a crash at %s: %s is failed: %s", after, sb.ID, sb.Reason)
		}
		if m.deleted[sb.ID] {
			t.Errorf("after a crash at %s: deleted sandbox %s is back (%s)", after, sb.ID, sb.State)
		}
	}
	for id, files := range m.acked {
		if _, ok := live[id]; !ok {
			t.Errorf("after a crash at %s: sandbox %s with acknowledged writes is gone", after, id)
			continue
		}
		for path, want := range files {
			m.checks++
			if got := m.read(id, path); got != want {
				t.Errorf("after a crash at %s: acknowledged write %s:%s holds %q, want %q", after, id, path, got, want)
			}
		}
	}
	return list
}

// dropOthers deletes every sandbox but keep, so that sandboxes made by
// one case do not pile up; they must stay gone.
func (m *crashMatrix) dropOthers(keep string) {
	m.t.Helper()
	list, err := m.s.client.ListSandboxes(m.ctx, client.ListOptions{})
	if err != nil {
		m.t.Fatal(err)
	}
	for _, sb := range list {
		if sb.ID == keep {
			continue
		}
		if err := m.s.client.DeleteSandbox(m.ctx, sb.ID); err != nil {
			m.t.Fatalf("delete %s: %v", sb.ID, err)
		}
		m.deleted[sb.ID] = true
		delete(m.acked, sb.ID)
	}
}

// checkLeaks looks for what an interrupted operation may leave behind:
// branch captures, staged or replaced root volumes, captures no snapshot
// owns, empty image directories, and network namespaces of sandboxes that
// do not run.
func (m *crashMatrix) checkLeaks(after string, live map[string]apiv1.Sandbox) {
	t := m.t
	t.Helper()
	vols := filepath.Join(m.s.dataDir, "volumes")
	// A branch's capture is released once its branches have started,
	// just after they show as running (startCopies): give it a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		left, _ := filepath.Glob(filepath.Join(vols, "snapshots", "*", "branch-*"))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after a crash at %s: branch captures left: %v", after, left)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, dir := range []string{"restoring", "previous"} {
		if left, _ := filepath.Glob(filepath.Join(vols, dir, "*")); len(left) != 0 {
			t.Errorf("after a crash at %s: volumes left in %s: %v", after, dir, left)
		}
	}
	owned := map[string]bool{}
	for id := range m.seen {
		snaps, err := m.s.client.ListSnapshots(m.ctx, id)
		if err != nil {
			continue
		}
		for _, sn := range snaps {
			owned[filepath.Join(vols, "snapshots", sn.SandboxID, sn.ID)] = true
		}
	}
	captures, _ := filepath.Glob(filepath.Join(vols, "snapshots", "*", "*"))
	for _, c := range captures {
		if !owned[c] {
			t.Errorf("after a crash at %s: capture %s belongs to no snapshot", after, c)
		}
	}
	images := filepath.Join(m.s.dataDir, "images")
	dirs, _ := filepath.Glob(filepath.Join(images, "*"))
	more, _ := filepath.Glob(filepath.Join(images, "*", "*"))
	for _, d := range append(dirs, more...) {
		if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
			t.Errorf("after a crash at %s: empty image directory %s", after, d)
		}
	}
	for id := range m.seen {
		if sb, ok := live[id]; ok && sb.State != apiv1.StateSuspended && sb.State != apiv1.StateStopped {
			continue
		}
		if left := namespaceFiles(m.s.dataDir, id); len(left) > 0 {
			t.Errorf("after a crash at %s: network namespace of %s, which does not run, is left: %v", after, id, left)
		}
	}
}

// Kill -9 of a separate server at named points of create, restore, branch,
// suspend, resume, snapshot and delete (internal/crashpoint), and at a few
// moments of a restore by timing: after each restart every acknowledged
// write is there (or the sandbox is the snapshot a recorded restore brought
// in), nothing is failed, and nothing leaked.
func TestCrashMatrix(t *testing.T) {
	s := newCrashServer(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	m := &crashMatrix{t: t, s: s, ctx: ctx, acked: map[string]map[string]string{}, seen: map[string]bool{}, deleted: map[string]bool{}}
	c := func() *client.Client { return s.client } // the client changes with every restart

	a := m.create(apiv1.CreateSandboxRequest{})
	m.write(a, "/home/user/snap.txt", "v1")
	m.writeSome(a)
	if _, err := c().CreateSnapshot(ctx, a, "s1"); err != nil {
		t.Fatal(err)
	}
	atSnapshot := maps.Clone(m.acked[a])

	// create
	for _, point := range []string{"copy-volume", "start-ran"} {
		var id string
		m.crash(point, func() error {
			sb, err := c().CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
			if err == nil {
				id = sb.ID
			}
			return err
		})
		m.settle("create/" + point)
		if id != "" {
			if sb, err := c().GetSandbox(ctx, id); err != nil || sb.State != apiv1.StateRunning {
				t.Errorf("create/%s: acknowledged sandbox %s: %+v, %v", point, id, sb, err)
			}
		}
		m.dropOthers(a)
	}
	// create from a snapshot
	m.crash("copy-volume", func() error {
		_, err := c().CreateSandbox(ctx, apiv1.CreateSandboxRequest{Snapshot: a + "/s1"})
		return err
	})
	for _, sb := range m.settle("create-from-snapshot/copy-volume") {
		if sb.Snapshot == a+"/s1" {
			if got := m.read(sb.ID, "/home/user/snap.txt"); got != "v1" {
				t.Errorf("sandbox started from s1 after a crash holds %q", got)
			}
		}
	}
	m.dropOthers(a)

	// restore, by crash point: not recorded → as before; recorded → s1
	for _, point := range []string{"restore-suspended", "restore-swapped", "restore-resumed", "restore-recorded"} {
		m.write(a, "/home/user/snap.txt", "v2 before "+point)
		m.writeSome(a)
		err := m.crash(point, func() error { _, err := c().Restore(ctx, a, "s1"); return err })
		if err == nil {
			t.Fatalf("restore/%s answered although the server died before", point)
		}
		if point == "restore-recorded" {
			// Recorded, so it happened; the answer was lost with the server.
			m.acked[a] = maps.Clone(atSnapshot)
		}
		m.settle("restore/" + point)
	}
	// restore, by timing
	for _, delay := range []time.Duration{0, 150 * time.Millisecond, 400 * time.Millisecond} {
		m.write(a, "/home/user/snap.txt", "v2 before a kill")
		m.writeSome(a)
		before := maps.Clone(m.acked[a])
		done := make(chan error, 1)
		go func() { _, err := c().Restore(ctx, a, "s1"); done <- err }()
		time.Sleep(delay)
		s.kill()
		m.crashes++
		err := <-done
		s.start()
		if got := m.read(a, "/home/user/snap.txt"); err == nil || got == "v1" {
			// Acknowledged (or recorded before the kill): the snapshot.
			m.acked[a] = maps.Clone(atSnapshot)
		} else {
			m.acked[a] = before
		}
		m.settle(fmt.Sprintf("restore/+%s", delay))
	}

	// branch
	for _, point := range []string{"branch-captured", "branch-admitted", "copy-volume"} {
		m.writeSome(a)
		m.crash(point, func() error { _, err := c().Branch(ctx, a, 2); return err })
		for _, sb := range m.settle("branch/" + point) {
			if sb.BranchOf == a && sb.State != apiv1.StateRunning {
				t.Errorf("branch/%s: branch %s is %s", point, sb.ID, sb.State)
			}
		}
		m.dropOthers(a)
	}

	// snapshot: a torn snapshot is discarded, its capture swept
	m.writeSome(a)
	m.crash("snapshot-captured", func() error { _, err := c().CreateSnapshot(ctx, a, "torn"); return err })
	m.settle("snapshot/snapshot-captured")
	if snaps, _ := c().ListSnapshots(ctx, a); len(snaps) != 1 {
		t.Errorf("after a crash during a snapshot: %d snapshots, want only s1", len(snaps))
	}

	// suspend, then resume
	m.writeSome(a)
	m.crash("suspend-checkpointed", func() error { _, err := c().Suspend(ctx, a); return err })
	m.settle("suspend/suspend-checkpointed")
	if sb, _ := c().GetSandbox(ctx, a); sb == nil || sb.State != apiv1.StateSuspended {
		// settle's reads resumed it; suspend it again for the resume case
		if _, err := c().Suspend(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	m.crash("resume-resumed", func() error { _, err := c().Resume(ctx, a); return err })
	m.settle("resume/resume-resumed")
	if _, err := os.Stat(filepath.Join(s.dataDir, "images", a, "suspend")); !os.IsNotExist(err) {
		t.Errorf("the suspend image a resume was adopted from is still there: %v", err)
	}
	// Were the image still recorded, losing the runtime now would bring
	// back memory older than the disk: it must boot from the disk instead.
	m.writeSome(a)
	s.kill()
	m.crashes++
	loseRuntime(a)
	s.start()
	if sb, err := c().WaitSandbox(ctx, a, apiv1.StateRunning, time.Minute); err != nil || !strings.Contains(sb.Recovered, "disk") {
		t.Errorf("after losing the runtime of a resumed sandbox: %+v, %v; want rebooted from its disk", sb, err)
	}
	m.settle("resume/host loss")

	// delete
	for _, point := range []string{"stop-recorded", "stop-destroyed"} {
		d := m.create(apiv1.CreateSandboxRequest{})
		m.deleted[d] = true
		m.crash(point, func() error { return c().DeleteSandbox(ctx, d) })
		m.settle("delete/" + point)
		if _, err := c().GetSandbox(ctx, d); !client.IsNotFound(err) {
			t.Errorf("delete/%s: the deleted sandbox is still there: %v", point, err)
		}
	}

	t.Logf("%d kills; %d reads of acknowledged writes after them", m.crashes, m.checks)

	list, err := c().ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if err := c().DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("delete %s: %v", sb.ID, err)
		}
	}
	var ids []string
	for id := range m.seen {
		ids = append(ids, id)
	}
	s.checkNothingLeft(ids)
}
