// Package nodeservice is a node as its control plane drives it, over the
// node RPC (noderpc serves it) or by calls in one house: the node
// (internal/node) with what it says of its templates. Its Info lists the
// templates it holds, so that placement only picks nodes that can run a
// template; it builds, stages and deletes templates with the node's
// template manager (nodeapi.Templates); and it names the built-in
// templates ready on it, for the control plane's catalog.
package nodeservice

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/node"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/template"
)

// Node is the node as its RPC service serves it.
type Node struct {
	*node.Node
	templates *template.Manager
	// log has what a caller is not told: the node's paths.
	log *slog.Logger
}

// New is n as its control plane drives it, with the manager of the
// templates built on it.
func New(n *node.Node, templates *template.Manager, logger *slog.Logger) Node {
	return Node{Node: n, templates: templates, log: logger}
}

func (h Node) Info(ctx context.Context) (nodeapi.Info, error) {
	info, err := h.Node.Info(ctx)
	if err != nil {
		return info, err
	}
	info.Templates = h.heldTemplates()
	received, err := h.receivedTemplates(ctx, info.Templates)
	if err != nil {
		return info, fmt.Errorf("node info: %w", err)
	}
	info.Templates = append(info.Templates, received...)
	return info, nil
}

// heldTemplates are the ids of the templates ready on this node.
func (h Node) heldTemplates() []string {
	var ids []string
	for _, t := range h.templates.List() {
		if t.State == template.StateReady && !slices.Contains(ids, t.ID) {
			ids = append(ids, t.ID)
		}
	}
	return ids
}

// BuiltinTemplates names the built-in templates ready on the node, for
// the control plane's catalog; the templates the cluster built on the
// node are in the control plane's own records.
func (h Node) BuiltinTemplates() []cpapi.Template {
	var out []cpapi.Template
	for name, id := range h.templates.Names() {
		if _, builtin := template.Builtin(name); !builtin {
			continue
		}
		t, err := h.templates.Get(id)
		if err != nil || t.State != template.StateReady {
			continue
		}
		out = append(out, cpapi.Template{Name: name, Spec: t.Spec(), SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, ReadyAt: t.ReadyAt})
	}
	return out
}
