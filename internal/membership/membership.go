// Package membership is a node's side of belonging to a cluster: it
// registers the node with the control plane, heartbeats the node's Info
// at an interval, and registers again whenever the control plane answers
// that it does not know the node (its store was reset, or an operator
// removed the node while it ran).
package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/nodeapi"
)

// InfoSource reports the node's Info (nodeapi.Control's Info).
type InfoSource interface {
	Info(ctx context.Context) (nodeapi.Info, error)
}

// ControlPlane is the part of the node → control-plane contract
// (cpapi.ControlPlane) membership drives. An unknown node's heartbeat
// answers an error wrapping cluster.ErrUnknownNode; a node removed as lost
// one wrapping cluster.ErrConflict.
type ControlPlane interface {
	Register(ctx context.Context, id, address string, info nodeapi.Info, templates []cpapi.Template) error
	Heartbeat(ctx context.Context, id string, info nodeapi.Info, templates []cpapi.Template) error
}

// DefaultInterval is how often a node heartbeats: a third of the
// control plane's default bound, so that one lost heartbeat, or two, does
// not make the node unreachable.
const DefaultInterval = cluster.DefaultHeartbeatTimeout / 3

// Config configures Run.
type Config struct {
	// ID and Address are the node's id and the URL it advertises.
	ID, Address  string
	Node         InfoSource
	ControlPlane ControlPlane
	// Templates, when set, lists the templates the node holds; every
	// registration and heartbeat carries them.
	Templates func() []cpapi.Template
	// Interval between heartbeats (DefaultInterval when zero); a failed
	// registration is retried at the same pace.
	Interval time.Duration
	// Registered says the control plane took the node's registration
	// already (one house registers its node in process before the
	// control plane recovers): Run begins with a heartbeat, and registers
	// only if the control plane answers that it does not know the node.
	Registered bool
	// Now, when set, sends a heartbeat at once on every receive: a node
	// whose templates changed tells the control plane without waiting
	// for the interval.
	Now    <-chan struct{}
	Logger *slog.Logger
}

// Run keeps the node registered until ctx ends (it returns nil then), or
// until the control plane says the node was removed as lost: a lost node
// stays out until an operator removes its record, so Run returns that
// error rather than knocking forever. Other failures are logged and tried
// again at the next interval; the control plane sees the silence if it
// lasts.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &member{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), registered: cfg.Registered}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for {
		err := m.beat(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, cluster.ErrConflict):
			return fmt.Errorf("node %s cannot join the cluster: %w", cfg.ID, err)
		case err != nil:
			m.log.Error("heartbeat to the control plane", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-cfg.Now:
		}
	}
}

// member is one node's membership.
type member struct {
	cfg        Config
	log        *slog.Logger
	registered bool
}

// beat sends one heartbeat, registering first when the control plane has
// not taken the node's registration yet or has forgotten it.
func (m *member) beat(ctx context.Context) error {
	info, err := m.cfg.Node.Info(ctx)
	if err != nil {
		return fmt.Errorf("read the node's info: %w", err)
	}
	var templates []cpapi.Template
	if m.cfg.Templates != nil {
		templates = m.cfg.Templates()
	}
	if m.registered {
		err := m.cfg.ControlPlane.Heartbeat(ctx, m.cfg.ID, info, templates)
		if !errors.Is(err, cluster.ErrUnknownNode) {
			return err
		}
		m.log.Warn("the control plane does not know this node; registering again")
		m.registered = false
	}
	if err := m.cfg.ControlPlane.Register(ctx, m.cfg.ID, m.cfg.Address, info, templates); err != nil {
		return fmt.Errorf("register with the control plane: %w", err)
	}
	m.registered = true
	m.log.Info("registered with the control plane", "address", m.cfg.Address)
	return nil
}
