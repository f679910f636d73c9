package nodeset

import (
	"context"
	"time"

	"github.com/space-platform/space/internal/cluster"
)

// OperatorView is the registry as the nodes routes show it (api.Nodes):
// read from the store, never from the registry's read cache, so that an
// operator sees a change made through another replica at once; and a node
// that runs in this process (one house's) shows its Info as it is now,
// not as its last heartbeat said.
type OperatorView struct {
	*cluster.Registry
	nodes *Set
}

// OperatorView is the set's registry as the nodes routes show it.
func (c *Set) OperatorView() OperatorView { return OperatorView{c.reg, c} }

func (v OperatorView) List() ([]cluster.Node, error) {
	list, err := v.ListStored()
	for i := range list {
		list[i] = v.fresh(list[i])
	}
	return list, err
}

func (v OperatorView) Get(id string) (cluster.Node, error) {
	n, err := v.GetStored(id)
	if err != nil {
		return n, err
	}
	return v.fresh(n), nil
}

// freshInfoTimeout bounds the Info call of an in-process node behind a
// nodes route; past it the route shows the last heartbeat's.
const freshInfoTimeout = 2 * time.Second

func (v OperatorView) fresh(n cluster.Node) cluster.Node {
	local, ok := v.nodes.InProcess(n.ID, n.Address)
	if !ok {
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), freshInfoTimeout)
	defer cancel()
	if info, err := local.Info(ctx); err == nil {
		n.Info = info
	}
	return n
}
