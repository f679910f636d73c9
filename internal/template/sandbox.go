package template

import (
	"context"
	"io"
)

// BuildSandboxes boots the gVisor sandboxes that a build's steps run in
// (the node implements it). The build's work volume is the sandbox's root
// filesystem, read-write; what the steps leave there becomes the
// template.
type BuildSandboxes interface {
	Start(ctx context.Context, volume string) (BuildSandbox, error)
}

// BuildSandbox is one running build sandbox.
type BuildSandbox interface {
	// Run runs script with /bin/sh -c as root in / and writes its output
	// to out; a non-zero exit is an error.
	Run(ctx context.Context, script string, env map[string]string, out io.Writer) error
	// WriteFile writes a file as root, creating its parents.
	WriteFile(ctx context.Context, path string, r io.Reader) error
	// Stop ends the sandbox; the volume stays.
	Stop(ctx context.Context) error
}

// runStep runs script in the sandbox and passes each line of its output
// to logLine.
func runStep(ctx context.Context, sb BuildSandbox, script string, env map[string]string, logLine func(string)) error {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyLines(pr, logLine)
		// A line longer than copyLines takes ends its scan; drain the
		// rest so the step's writer never blocks.
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := sb.Run(ctx, script, env, pw)
	pw.Close()
	<-done
	return err
}
