package api

import (
	"net/http"
	"sort"

	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// keysByProject counts the keys of each project.
func (s *Server) keysByProject() map[string]int {
	n := map[string]int{}
	for _, k := range s.cfg.Keys.List() {
		n[project.Of(k.Project)]++
	}
	return n
}

// projectView is a project's quota, settings and usage; keys is
// keysByProject's count, taken once for a whole list.
func (s *Server) projectView(name string, keys int) apiv1.Project {
	q, o := s.cfg.Quotas.Of(name), s.cfg.Quotas.Override(name)
	u := s.cp.Usage(name)
	v := apiv1.Project{
		Name: name, Quota: q, Settings: o,
		Usage: apiv1.ProjectUsage{Sandboxes: u.Sandboxes, MemoryMB: u.MemoryMB, Snapshots: u.Snapshots, Keys: keys, VolumeMB: u.VolumeMB},
	}
	if s.cfg.Templates != nil {
		// A store that cannot be read shows none: the quota is
		// enforced at each build, which reports the error.
		used, _ := s.cfg.Templates.DiskUsed(name)
		v.Usage.TemplateDiskMB = int(used >> 20)
	}
	return v
}

// listProjects lists every project something belongs to: keys, sandboxes
// and quota settings name them.
func (s *Server) listProjects(w http.ResponseWriter, _ *http.Request) {
	keys := s.keysByProject()
	names := map[string]bool{project.Default: true}
	for p := range keys {
		names[p] = true
	}
	for _, sb := range s.cp.List(project.Everything, controlplane.Filter{}) {
		names[project.Of(sb.Project)] = true
	}
	for _, p := range s.cfg.Quotas.Projects() {
		names[p] = true
	}
	out := apiv1.ProjectList{Projects: []apiv1.Project{}}
	for name := range names {
		out.Projects = append(out.Projects, s.projectView(name, keys[name]))
	}
	sort.Slice(out.Projects, func(i, j int) bool { return out.Projects[i].Name < out.Projects[j].Name })
	writeJSON(w, http.StatusOK, out)
}

// getProject shows any valid project name: a project exists as soon as
// something names it, so one with nothing yet has the default quota.
func (s *Server) getProject(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := project.ValidName(name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.projectView(name, s.keysByProject()[name]))
}

// setProject replaces a project's quota settings; a field left out takes
// the server's default again.
func (s *Server) setProject(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := project.ValidName(name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var o project.Override
	if !s.readJSON(w, r, &o) {
		return
	}
	if err := project.ValidateOverride(o); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := s.cfg.Quotas.Set(name, o); err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.projectView(name, s.keysByProject()[name]))
}
