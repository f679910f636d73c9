package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/runtime"
)

// DefaultSettle is how long after a placement a node's heartbeat is
// trusted to count the sandbox placed on it.
const DefaultSettle = 2 * time.Second

// warmBonus is what a node holding the template's booted image gains in
// score: a warm create restores instead of booting, but the bonus is
// bounded so that load still spreads (a node becomes warm by its first
// create of the template).
const warmBonus = 0.25

// PlacementConfig tunes Place.
type PlacementConfig struct {
	// Choices is the k of best of k: how many nodes, drawn at random
	// from those that fit, are compared (2 when zero); all of them when
	// there are no more than that. Drawing few keeps replicas that place
	// at once from all choosing the same emptiest node.
	Choices int
	// Rand draws the candidates (seeded from the clock when nil); tests
	// inject a fixed one.
	Rand *rand.Rand
	// MemoryOvercommit bounds the sum of the memory limits of a node's
	// sandboxes at its memory times this factor; 0: only its free memory
	// bounds a placement.
	MemoryOvercommit float64
	// Settle is how long a placement stays reserved on its node before
	// the node's next heartbeat is trusted to count it (DefaultSettle
	// when zero). A node counts a sandbox in its commitment from the
	// moment it accepts the create.
	Settle time.Duration
}

func (c PlacementConfig) withDefaults() PlacementConfig {
	if c.Choices <= 0 {
		c.Choices = 2
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	}
	if c.Settle <= 0 {
		c.Settle = DefaultSettle
	}
	return c
}

// PlaceRequest is a sandbox to place.
type PlaceRequest struct {
	// Template is the template's id; only a node holding it can run the
	// sandbox. Empty: any node.
	Template string
	VCPUs    int
	MemoryMB int
	DiskMB   int
	// Pooled says the request's limits are those of the template's pool,
	// so a pooled sandbox can serve it.
	Pooled bool
	// Node pins the sandbox to one node (it mounts volumes that live
	// there); empty: any node.
	Node string
	// Runtime is the backend the sandbox runs on; only a node that has
	// it can run the sandbox. Empty: any node.
	Runtime string
}

// hasRuntime reports whether a node offers backend rt; a node that
// reports none is from before the choice and runs gVisor only.
func hasRuntime(info nodeapi.Info, rt string) bool {
	if rt == "" {
		return true
	}
	if len(info.Runtimes) == 0 {
		return rt == runtime.GVisor
	}
	_, ok := info.Runtimes[rt]
	return ok
}

func (q PlaceRequest) String() string {
	s := fmt.Sprintf("%d vCPUs / %d MiB of memory / %d MiB of disk", q.VCPUs, q.MemoryMB, q.DiskMB)
	if q.Template != "" {
		s += " of template " + q.Template
	}
	if q.Runtime != "" && q.Runtime != runtime.GVisor {
		s += " on the " + q.Runtime + " runtime"
	}
	if q.Node != "" {
		s += " on node " + q.Node + " (where its volumes live)"
	}
	return s
}

// reservation is a placement the node's heartbeats do not count yet, so
// that a burst of creates spreads instead of piling onto the node that
// looked emptiest at the last heartbeat.
type reservation struct {
	node            string
	vcpus, memoryMB int
	// pool is the template whose pooled sandbox the placement takes
	// (its limits are already committed on the node).
	pool string
	at   time.Time
}

// candidate is a node that can take the request, with what it has left.
type candidate struct {
	id     string
	score  float64
	pooled bool
}

// CapacityError is a refusal of Place with the cluster's figures.
type CapacityError struct {
	Request PlaceRequest
	// Nodes is how many nodes the registry holds, NotReady how many of
	// them are in each other state.
	Nodes    int
	NotReady map[State]int
	// Holding is how many ready nodes hold the template; the figures
	// below are the largest among them.
	Holding      int
	FreeMemoryMB int
	VCPUs        int
	FreeDiskMB   int
}

func (e *CapacityError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no node can fit %s: ", e.Request)
	ready := e.Nodes
	for _, n := range e.NotReady {
		ready -= n
	}
	switch {
	case e.Nodes == 0:
		b.WriteString("no node has joined the cluster")
	case ready == 0:
		fmt.Fprintf(&b, "%d nodes, none ready", e.Nodes)
	case e.Holding == 0:
		fmt.Fprintf(&b, "%d nodes, none of the %d ready holds the template", e.Nodes, ready)
	default:
		fmt.Fprintf(&b, "%d nodes, largest free memory %d MiB, most vCPUs %d, largest free disk %d MiB",
			e.Nodes, e.FreeMemoryMB, e.VCPUs, e.FreeDiskMB)
	}
	var states []string
	for s := range e.NotReady {
		states = append(states, string(s))
	}
	sort.Strings(states)
	for _, s := range states {
		fmt.Fprintf(&b, ", %d %s", e.NotReady[State(s)], s)
	}
	return b.String()
}

func (e *CapacityError) Unwrap() error { return ErrNoCapacity }

// Place chooses the node a new sandbox goes to, among the ready nodes that
// hold its template and can fit it: a node with a pooled sandbox ready for
// the request wins; otherwise the best of k nodes drawn at random, by
// memory left and vCPU commitment, a node with the template's booted image
// scoring higher. The placement is reserved on the node until its
// heartbeats count it; reservations are this replica's, so placements of
// two replicas within one heartbeat do not see each other. A refusal is a
// *CapacityError.
func (r *Registry) Place(req PlaceRequest) (string, error) {
	// Under mu, so that a heartbeat cannot settle reservations between
	// reading the nodes' figures and weighing the reservations.
	r.mu.Lock()
	defer r.mu.Unlock()
	nodes, err := r.List()
	if err != nil {
		return "", err
	}
	pc := r.cfg.Placement
	refusal := &CapacityError{Request: req, Nodes: len(nodes), NotReady: map[State]int{}}
	var fits []candidate
	for _, n := range nodes {
		if !n.Schedulable() {
			refusal.NotReady[n.State]++
			continue
		}
		info := n.Info
		if req.Node != "" && n.ID != req.Node {
			continue
		}
		if req.Template != "" && !slices.Contains(info.Templates, req.Template) && !slices.Contains(info.TemplateImages, req.Template) {
			continue
		}
		if !hasRuntime(info, req.Runtime) {
			continue
		}
		var vcpus, memory, claims int
		for _, res := range r.reservations {
			if res.node == n.ID {
				vcpus += res.vcpus
				memory += res.memoryMB
				if res.pool != "" && res.pool == req.Template {
					claims++
				}
			}
		}
		free := info.MemoryFreeMB - memory
		if pc.MemoryOvercommit > 0 {
			free = min(free, int(float64(info.MemoryMB)*pc.MemoryOvercommit)-info.MemoryCommittedMB-memory)
		}
		refusal.Holding++
		refusal.FreeMemoryMB = max(refusal.FreeMemoryMB, free)
		refusal.VCPUs = max(refusal.VCPUs, info.VCPUs)
		refusal.FreeDiskMB = max(refusal.FreeDiskMB, info.DiskFreeMB)

		// A pooled sandbox's limits are committed already: taking it
		// adds nothing.
		pooled := req.Pooled && req.Template != "" && info.Pools[req.Template].Ready-claims > 0
		addVCPUs, addMemory := req.VCPUs, req.MemoryMB
		if pooled {
			addVCPUs, addMemory = 0, 0
		}
		if !pooled && (req.VCPUs > info.VCPUs || req.MemoryMB > free || req.DiskMB > info.DiskFreeMB) {
			continue
		}
		score := 0.0
		if info.MemoryMB > 0 {
			score += float64(free-addMemory) / float64(info.MemoryMB)
		}
		if info.VCPUs > 0 {
			score -= float64(info.VCPUsCommitted+vcpus+addVCPUs) / float64(info.VCPUs)
		}
		if slices.Contains(info.TemplateImages, req.Template) {
			score += warmBonus
		}
		fits = append(fits, candidate{id: n.ID, score: score, pooled: pooled})
	}
	if len(fits) == 0 {
		return "", refusal
	}
	if slices.ContainsFunc(fits, func(c candidate) bool { return c.pooled }) {
		fits = slices.DeleteFunc(fits, func(c candidate) bool { return !c.pooled })
	}
	if len(fits) > pc.Choices {
		drawn := make([]candidate, pc.Choices)
		for i, j := range r.rng.Perm(len(fits))[:pc.Choices] {
			drawn[i] = fits[j]
		}
		fits = drawn
	}
	best := fits[0]
	for _, c := range fits[1:] {
		if c.score > best.score || c.score == best.score && c.id < best.id {
			best = c
		}
	}
	res := reservation{node: best.id, vcpus: req.VCPUs, memoryMB: req.MemoryMB, at: r.cfg.Now()}
	if best.pooled {
		res = reservation{node: best.id, pool: req.Template, at: res.at}
	}
	r.reservations = append(r.reservations, res)
	return best.id, nil
}

// settle drops the reservations on node id that a heartbeat received at
// now counts. mu is held.
func (r *Registry) settle(id string, now time.Time) {
	r.reservations = slices.DeleteFunc(r.reservations, func(res reservation) bool {
		return res.node == id && now.Sub(res.at) >= r.cfg.Placement.Settle
	})
}

// dropReservations forgets every reservation on node id. mu is held.
func (r *Registry) dropReservations(id string) {
	r.reservations = slices.DeleteFunc(r.reservations, func(res reservation) bool { return res.node == id })
}
