package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestReapAllDispatchesKnownAndReapsUnknown runs the PID-1 mode reaper in
// the test process: a registered child's status reaches its callback, and
// an unregistered child (standing in for a reparented orphan) is reaped.
func TestReapAllDispatchesKnownAndReapsUnknown(t *testing.T) {
	r := newReaper(true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.run(ctx)

	got := make(chan exitStatus, 1)
	cmd := exec.Command("/bin/sh", "-c", "exit 5")
	if _, err := r.spawn(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	}, func(st exitStatus) { got <- st }); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-got:
		if st.exitCode() != 5 || st.String() != "exit status 5" {
			t.Errorf("status %v", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("registered child's status never arrived")
	}

	orphan, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	pid := orphan.Pid
	_ = orphan.Release()
	// A zombie stays in /proc until someone reaps it.
	eventually(t, "unregistered child reaped", func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(pid))
		return errors.Is(err, os.ErrNotExist)
	})
}
