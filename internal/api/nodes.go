package api

import (
	"net/http"
	"strconv"

	"github.com/space-platform/space/internal/cluster"
	"github.com/space-platform/space/pkg/apiv1"
)

// Nodes is the registry of the cluster's nodes as the nodes routes use it
// (*cluster.Registry, on a cluster and in space serve's one house).
// Errors wrap cluster.ErrUnknownNode (404), cluster.ErrConflict (409) or
// cluster.ErrInvalid (400).
type Nodes interface {
	List() ([]cluster.Node, error)
	Get(id string) (cluster.Node, error)
	Cordon(id string) (cluster.Node, error)
	Uncordon(id string) (cluster.Node, error)
	Drain(id string) (cluster.Node, error)
	// Remove deletes the node's record (removed) or, with force, marks it
	// lost.
	Remove(id string, force bool) (n cluster.Node, removed bool, err error)
}

func nodeView(n cluster.Node) apiv1.Node {
	i := n.Info
	v := apiv1.Node{
		ID: n.ID, Address: n.Address, State: string(n.State), Reason: n.Reason,
		VCPUs: i.VCPUs, MemoryMB: i.MemoryMB, DiskMB: i.DiskMB,
		Sandboxes: i.Sandboxes, MemoryFreeMB: i.MemoryFreeMB, DiskFreeMB: i.DiskFreeMB,
		VCPUsCommitted: i.VCPUsCommitted, MemoryCommittedMB: i.MemoryCommittedMB,
		Templates:      append([]string{}, i.Templates...),
		TemplateImages: append([]string{}, i.TemplateImages...),
		Pools:          map[string]apiv1.PoolStatus{},
		RegisteredAt:   n.RegisteredAt, LastHeartbeat: n.LastHeartbeat,
	}
	for id, p := range i.Pools {
		v.Pools[id] = apiv1.PoolStatus{Size: p.Size, Ready: p.Ready}
	}
	return v
}

// nodes returns the registry, or answers that this server has none.
func (s *Server) nodes(w http.ResponseWriter) (Nodes, bool) {
	if s.cfg.Nodes == nil {
		writeError(w, http.StatusNotImplemented, "this server keeps no registry of nodes")
		return nil, false
	}
	return s.cfg.Nodes, true
}

// withNode serves a route of one node: h gets the registry and the
// route's node id, which is answered 400 when malformed.
func (s *Server) withNode(h func(w http.ResponseWriter, r *http.Request, reg Nodes, id string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		reg, ok := s.nodes(w)
		if !ok {
			return
		}
		id := r.PathValue("id")
		if err := cluster.ValidID(id); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		h(w, r, reg, id)
	}
}

func (s *Server) listNodes(w http.ResponseWriter, _ *http.Request) {
	reg, ok := s.nodes(w)
	if !ok {
		return
	}
	list, err := reg.List()
	if err != nil {
		s.fail(w, err)
		return
	}
	out := apiv1.NodeList{Nodes: []apiv1.Node{}}
	for _, n := range list {
		out.Nodes = append(out.Nodes, nodeView(n))
	}
	writeJSON(w, http.StatusOK, out)
}

// nodeAction serves get, cordon, uncordon and drain: the node as it is
// after act, with status (drain answers 202: moving the sandboxes goes on).
func (s *Server) nodeAction(status int, act func(Nodes, string) (cluster.Node, error)) http.HandlerFunc {
	return s.withNode(func(w http.ResponseWriter, _ *http.Request, reg Nodes, id string) {
		n, err := act(reg, id)
		if err != nil {
			s.fail(w, err)
			return
		}
		writeJSON(w, status, nodeView(n))
	})
}

// removeNode deletes a node (204), or with ?force=true marks one that
// still has sandboxes lost (200 with the node).
func (s *Server) removeNode(w http.ResponseWriter, r *http.Request, reg Nodes, id string) {
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		var err error
		if force, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, "force must be true or false, got "+strconv.Quote(v))
			return
		}
	}
	n, removed, err := reg.Remove(id, force)
	if err != nil {
		s.fail(w, err)
		return
	}
	if removed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, nodeView(n))
}
