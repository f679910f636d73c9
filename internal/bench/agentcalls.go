package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// fileSize is the payload of file_1mib.
const fileSize = 1 << 20

// filePath is on the sandbox's disk volume, not a tmpfs: a write there is
// answered only once fsynced, which is the durable write the figure is for.
const filePath = "/home/user/space-bench-1mib.bin"

// withSandbox runs fn on a fresh running sandbox of the template's default
// size and deletes it afterwards.
func (r *runner) withSandbox(ctx context.Context, fn func(id string) error) error {
	sb, _, err := r.createRunning(ctx, r.request(0, shortLifetimeS))
	if err != nil {
		return err
	}
	return errors.Join(fn(sb.ID), r.remove(ctx, sb.ID))
}

// measureExecRTT times POST .../exec of `true` on one running sandbox,
// after one unmeasured call that opens the connections on the way.
func (r *runner) measureExecRTT(ctx context.Context) (s *Summary, err error) {
	err = r.withSandbox(ctx, func(id string) error {
		execTrue := func() error {
			res, err := r.api.Exec(ctx, id, apiv1.ExecRequest{Cmd: []string{"true"}})
			if err != nil {
				return fmt.Errorf("exec true in %s: %w", id, err)
			}
			if res.ExitCode != 0 {
				return fmt.Errorf("exec true in %s: exit %d: %s", id, res.ExitCode, res.Stderr)
			}
			return nil
		}
		if err := execTrue(); err != nil {
			return err
		}
		s, err = r.sample(ctx, KeyExecRTT, func(context.Context, int) (time.Duration, error) {
			return timed(execTrue)
		})
		return err
	})
	return s, err
}

// measureFile1MiB times a PUT of 1 MiB of random bytes followed by a GET of
// the same file, checking the bytes that come back.
func (r *runner) measureFile1MiB(ctx context.Context) (s *Summary, err error) {
	payload := make([]byte, fileSize)
	if _, err := rand.Read(payload); err != nil {
		return nil, err
	}
	err = r.withSandbox(ctx, func(id string) error {
		roundTrip := func() error {
			if _, err := r.api.WriteFile(ctx, id, filePath, bytes.NewReader(payload)); err != nil {
				return fmt.Errorf("write %s in %s: %w", filePath, id, err)
			}
			body, err := r.api.ReadFile(ctx, id, filePath)
			if err != nil {
				return fmt.Errorf("read %s in %s: %w", filePath, id, err)
			}
			defer body.Close()
			got, err := io.ReadAll(body)
			if err != nil {
				return fmt.Errorf("read %s in %s: %w", filePath, id, err)
			}
			if !bytes.Equal(got, payload) {
				return fmt.Errorf("read %s in %s: got %d bytes that differ from the %d written", filePath, id, len(got), len(payload))
			}
			return nil
		}
		if err := roundTrip(); err != nil {
			return err
		}
		s, err = r.sample(ctx, KeyFile1MiB, func(context.Context, int) (time.Duration, error) {
			return timed(roundTrip)
		})
		return err
	})
	return s, err
}
