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
	// Run runs script with /bin/sh -c as root in / and passes each line
	// of its output to logLine; a non-zero exit is an error.
	Run(ctx context.Context, script string, env map[string]string, logLine func(string)) error
	// WriteFile writes a file as root, creating its parents.
	WriteFile(ctx context.Context, path string, r io.Reader) error
	// Stop ends the sandbox; the volume stays.
	Stop(ctx context.Context) error
}
